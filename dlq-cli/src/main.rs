//! The `dlq` binary: a thin `main` over [`dlq_cli::run`].

#[tokio::main]
async fn main() -> std::process::ExitCode {
    dlq_cli::run(std::env::args_os()).await
}
