//! What the PostgreSQL benches share: their database's name and the CPU they and PostgreSQL spent.

/// The database a bench creates and drops: `DLQ_BENCH_DB`, or `default`. Refuses names that
/// are not plain `[a-z0-9_]`, and the shared databases.
pub(crate) fn bench_database(default: &str) -> Result<String, String> {
    let db = std::env::var("DLQ_BENCH_DB").unwrap_or_else(|_| default.to_owned());
    let plain = !db.is_empty() && db.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !plain || db == "postgres" || db == "test" {
        return Err(format!("DLQ_BENCH_DB={db:?}: use [a-z0-9_] only, and not a shared database"));
    }
    Ok(db)
}

/// CPU ticks (10 ms) so far of this process and of every `postgres` process (Linux `/proc`).
pub(crate) fn cpu_ticks() -> (u64, u64) {
    let ticks = |stat: &str| -> u64 {
        let fields: Vec<&str> = stat.rsplit_once(") ").map_or("", |(_, rest)| rest).split(' ').collect();
        fields.get(11..13).map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum())
    };
    let own = std::fs::read_to_string("/proc/self/stat").map_or(0, |s| ticks(&s));
    let postgres = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| stat.contains("(postgres)"))
        .map(|stat| ticks(&stat))
        .sum();
    (own, postgres)
}
