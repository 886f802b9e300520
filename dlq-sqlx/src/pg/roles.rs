//! Least-privilege roles for one schema (`sql/roles.sql`), and the error a denied statement
//! becomes.

use sqlx::{PgConnection, PgPool};

use dlq_core::store::StoreResult;

use super::schema::validate_identifier;

/// The four group roles of a deployment for one schema, named from a prefix: `{prefix}_migrator`
/// owns the schema, `{prefix}_service` parks and runs retriers, `{prefix}_operator_read` reads
/// (`ls`, `show`, `stats`, the console's pages) and `{prefix}_operator` acts. They are `NOLOGIN`:
/// a deployment grants them to its login users (`GRANT dlq_service TO app`).
///
/// ```
/// let roles = dlq_sqlx::postgres::Roles::with_prefix("dlq").unwrap();
/// assert_eq!(roles.service, "dlq_service");
/// assert_eq!(roles.operator_read, "dlq_operator_read");
/// assert!(dlq_sqlx::postgres::Roles::with_prefix("x; DROP ROLE y").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Roles {
    /// Owns the schema and its objects: runs `dlq migrate`.
    pub migrator: String,
    /// Parks and runs retriers; cannot discard, erase, patch or read the audit log.
    pub service: String,
    /// Reads only: `ls`, `show`, `stats`, `groups`, the console's pages.
    pub operator_read: String,
    /// Everything `operator_read` may, and the operator's actions.
    pub operator: String,
}

/// The longest role name, `{prefix}_operator_read` with the longest prefix, fits in 63 bytes.
const LONGEST_SUFFIX: &str = "_operator_read";

impl Roles {
    /// The roles named `{prefix}_migrator`, `{prefix}_service`, `{prefix}_operator_read` and
    /// `{prefix}_operator`.
    ///
    /// # Errors
    /// [`dlq_core::Error::Config`] (key `prefix`) when `prefix` is not a plain identifier short
    /// enough for the longest name to fit in 63 bytes.
    pub fn with_prefix(prefix: &str) -> StoreResult<Self> {
        validate_identifier("prefix", "role prefix", prefix, 63 - LONGEST_SUFFIX.len())?;
        if prefix.chars().any(|c| c.is_ascii_uppercase()) {
            // An unquoted `GRANT Dlq_service TO app` would name `dlq_service`.
            let reason = format!("invalid role prefix {prefix:?}: use lowercase letters, as unquoted names are");
            return Err(dlq_core::Error::Config { key: "prefix".into(), file: None, reason });
        }
        Ok(Self {
            migrator: format!("{prefix}_migrator"),
            service: format!("{prefix}_service"),
            operator_read: format!("{prefix}{LONGEST_SUFFIX}"),
            operator: format!("{prefix}_operator"),
        })
    }
}

/// The SQL that creates `roles` (those missing) and gives each the grants it needs on `schema`,
/// and only those, in one transaction: re-runnable, and to be re-run after each `dlq migrate`
/// so that tables a newer migration added get their grants (docs/DESIGN.md, "Roles and grants").
/// Run it as a role that may create roles and owns the schema's objects (on a managed
/// database, its admin user); [`apply_roles`] runs it.
///
/// # Errors
/// [`dlq_core::Error::Config`] (key `schema`) for a schema name that is not a plain identifier.
///
/// ```
/// use dlq_sqlx::postgres::{Roles, roles_sql};
///
/// let sql = roles_sql("dlq", &Roles::with_prefix("payments")?)?;
/// assert!(sql.contains("'payments_service'") && sql.contains("CREATE ROLE %I NOLOGIN"));
/// assert!(sql.contains(r#"GRANT SELECT (dlq_id), DELETE ON "dlq".dlq_audit TO "payments_service""#));
/// # Ok::<(), dlq_core::Error>(())
/// ```
pub fn roles_sql(schema: &str, roles: &Roles) -> StoreResult<String> {
    super::validate_schema(schema)?;
    for (name, key) in [
        (&roles.migrator, "migrator"),
        (&roles.service, "service"),
        (&roles.operator_read, "operator_read"),
        (&roles.operator, "operator"),
    ] {
        validate_identifier(key, "role name", name, 63)?;
    }
    // Only validated identifiers are put into the text: quoted where they name an object,
    // bare inside string literals (no quote can be in them).
    let quoted = |name: &str| format!("\"{name}\"");
    let latest = super::MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    Ok(include_str!("sql/roles.sql")
        .replace("{latest_migration}", &latest.to_string())
        .replace("{schema_name}", schema)
        .replace("{migrator_name}", &roles.migrator)
        .replace("{service_name}", &roles.service)
        .replace("{reader_name}", &roles.operator_read)
        .replace("{operator_name}", &roles.operator)
        .replace("{schema}", &quoted(schema))
        .replace("{migrator}", &quoted(&roles.migrator))
        .replace("{service}", &quoted(&roles.service))
        .replace("{reader}", &quoted(&roles.operator_read))
        .replace("{operator}", &quoted(&roles.operator)))
}

/// Runs [`roles_sql`] on `pool`: creates the missing roles and sets their grants on `schema`,
/// all or nothing.
///
/// # Errors
/// As [`roles_sql`]; [`dlq_core::Error::Store`] when the statements fail (for example a role
/// without `CREATEROLE`, or not the owner of the schema's objects: nothing is changed then).
///
/// ```no_run
/// # async fn demo(admin: sqlx::PgPool) -> Result<(), dlq_core::Error> {
/// use dlq_sqlx::postgres::{Roles, apply_roles, migrate};
/// migrate(&admin, "dlq").await?;
/// apply_roles(&admin, "dlq", &Roles::with_prefix("dlq")?).await?;
/// # Ok(()) }
/// ```
pub async fn apply_roles(pool: &PgPool, schema: &str, roles: &Roles) -> StoreResult<()> {
    let sql = roles_sql(schema, roles)?;
    let mut conn = pool.acquire().await.map_err(dlq_core::Error::store)?;
    let result = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut *conn).await;
    if result.is_err() {
        // A failed statement leaves its transaction open on this connection: close it here.
        let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await;
    }
    drop(conn);
    match result {
        Ok(_) => Ok(()),
        Err(err) => Err(deny(pool, dlq_core::Error::store(err), "set up the roles", Need::Admin).await),
    }
}

/// Which grants an action needs: the role named in the message of a denied one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// `{prefix}_service`'s.
    Service,
    /// `{prefix}_operator_read`'s.
    Read,
    /// `{prefix}_operator`'s.
    Operator,
    /// `{prefix}_migrator`'s: the schema's ownership.
    Migrator,
    /// `CREATEROLE` and the ownership of the schema's objects.
    Admin,
}

impl Need {
    const fn hint(self) -> &'static str {
        match self {
            Self::Service => "it needs the service role's grants, see `dlq roles`",
            Self::Read => "it needs the operator-read role's grants, see `dlq roles`",
            Self::Operator => "it needs the operator role's grants, see `dlq roles`",
            Self::Migrator => "it needs to own the schema (the migrator role), see `dlq roles`",
            Self::Admin => "it needs CREATEROLE and to own the schema's objects",
        }
    }
}

/// A statement PostgreSQL refused for want of a privilege (SQLSTATE 42501), said in one line
/// that names the role, what it may not do and what PostgreSQL found missing. The source of
/// a [`dlq_core::Error::Store`]; nothing of the action was written (each runs in one
/// transaction, rolled back).
#[derive(Debug, thiserror::Error)]
#[error("permission denied: role `{role}` may not {action} ({missing}): {hint}")]
pub(crate) struct Denied {
    role: String,
    action: &'static str,
    missing: String,
    hint: &'static str,
}

/// The server's message when `err` is a refused privilege (SQLSTATE 42501).
pub(crate) fn denied_message(err: &dlq_core::Error) -> Option<String> {
    let dlq_core::Error::Store(source) = err else { return None };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&**source);
    while let Some(err) = cause {
        if let Some(sqlx::Error::Database(db)) = err.downcast_ref::<sqlx::Error>() {
            return (db.code().as_deref() == Some("42501")).then(|| db.message().to_owned());
        }
        cause = err.source();
    }
    None
}

/// `err` as [`Denied`] when PostgreSQL refused a privilege, naming the role the statement ran
/// as (asked of the server: a login user may act as a role it was granted); else `err`.
pub(crate) async fn deny(pool: &PgPool, err: dlq_core::Error, action: &'static str, need: Need) -> dlq_core::Error {
    let Some(missing) = denied_message(&err) else { return err };
    let role = current_user(pool).await.unwrap_or_else(|| pool.connect_options().get_username().to_owned());
    dlq_core::Error::store(Denied { role, action, missing, hint: need.hint() })
}

/// [`deny`] on a connection of its own (the migrations').
pub(crate) async fn deny_on(
    conn: &mut PgConnection,
    err: dlq_core::Error,
    action: &'static str,
    need: Need,
) -> dlq_core::Error {
    let Some(missing) = denied_message(&err) else { return err };
    let role = current_user(&mut *conn).await.unwrap_or_else(|| "(unknown)".to_owned());
    dlq_core::Error::store(Denied { role, action, missing, hint: need.hint() })
}

async fn current_user<'c>(executor: impl sqlx::PgExecutor<'c>) -> Option<String> {
    sqlx::query_scalar("SELECT current_user::text").fetch_one(executor).await.ok()
}
