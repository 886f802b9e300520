//! The least-privilege roles of `dlq roles` (`dlq_sqlx::postgres::roles_sql`) on the real
//! server: the migrations run by a non-superuser that owns only its schema, the conformance
//! suite on a store connected as it, the service role parking and retrying but refused the
//! operator's actions with one line that names it, and nothing of a refused action written.
//! Run with `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres` (trust auth, so any
//! login role may connect). Roles are cluster-wide: each test names its own after its
//! database and drops them at the end.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod pg_support;

use std::time::Duration;

use dlq_core::store::{ActionKind, BatchAction, EraseRequest, PatchRequest, Settlement, SubjectHash};
use dlq_core::{DlqId, Payload, store::AuditNote, store::prelude::*};
use dlq_sqlx::postgres::{Roles, apply_roles, roles_sql};
use dlq_sqlx::{PgConfig, PgStore};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use pg_support::{letter, request};

const SCHEMA: &str = "dq";

/// The four roles for the test's database, with a login user in each, dropped by [`Self::drop`].
struct Deployment {
    /// The superuser of the test: sets up the managed database's admin user, and drops all.
    admin: PgPool,
    /// A managed database's admin user: `CREATEROLE` and `CREATE` on the database, no
    /// superuser. It runs the roles' SQL.
    manager: PgPool,
    roles: Roles,
}

/// Which of the four roles a login user acts as.
#[derive(Clone, Copy)]
enum As {
    Migrator,
    Service,
    Reader,
    Operator,
}

impl Deployment {
    /// Creates the roles (as a managed database's admin user, no superuser, before any table
    /// exists) and a login user in each: `{role}_login`.
    async fn new(admin: &PgPool) -> Self {
        let db: String = sqlx::query_scalar("SELECT current_database()::text").fetch_one(admin).await.unwrap();
        // The database's name is unique to the test (and too long for a prefix): its hash.
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&db, &mut hasher);
        let prefix = format!("t{:016x}", std::hash::Hasher::finish(&hasher));
        let roles = Roles::with_prefix(&prefix).unwrap();
        let manager = format!("{prefix}_admin");
        let options = (*admin.connect_options()).clone().username(&manager);
        let manager_pool = PgPoolOptions::new().max_connections(2).connect_lazy_with(options);
        let deployment = Self { admin: admin.clone(), manager: manager_pool, roles };
        deployment.drop_roles().await; // left by an earlier run of this test that failed
        let create = format!(
            "CREATE ROLE \"{manager}\" LOGIN NOSUPERUSER CREATEROLE; GRANT CREATE ON DATABASE \"{db}\" TO \"{manager}\""
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(create)).execute(admin).await.unwrap();
        let manager = &deployment.manager;
        apply_roles(manager, SCHEMA, &deployment.roles).await.expect("roles before the migrations, as no superuser");
        for role in [As::Migrator, As::Service, As::Reader, As::Operator] {
            let group = deployment.group(role);
            let login =
                format!("CREATE ROLE \"{group}_login\" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE IN ROLE \"{group}\"");
            sqlx::query(sqlx::AssertSqlSafe(login)).execute(manager).await.unwrap();
        }
        deployment
    }

    fn group(&self, role: As) -> &str {
        match role {
            As::Migrator => &self.roles.migrator,
            As::Service => &self.roles.service,
            As::Reader => &self.roles.operator_read,
            As::Operator => &self.roles.operator,
        }
    }

    /// A pool logged in as the role's login user; the migrator's acts as the migrator role
    /// (`-c role=`), so that what it creates is the role's.
    fn pool(&self, role: As) -> PgPool {
        let group = self.group(role);
        let mut options: PgConnectOptions = (*self.admin.connect_options()).clone().username(&format!("{group}_login"));
        if matches!(role, As::Migrator) {
            options = options.options([("role", group)]);
        }
        PgPoolOptions::new().max_connections(4).connect_lazy_with(options)
    }

    /// A store as `role`, without migrating.
    async fn store(&self, role: As) -> PgStore {
        let config = PgConfig::default().schema(SCHEMA).run_migrations(false);
        PgStore::from_pool(self.pool(role), config).await.unwrap()
    }

    /// Drops the login users and the roles (their grants first: roles are cluster-wide).
    async fn drop(self) {
        self.manager.close().await;
        let drop = format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; DROP OWNED BY {}", self.names());
        sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(&self.admin).await.unwrap();
        self.drop_roles().await;
    }

    async fn drop_roles(&self) {
        let drop = format!("DROP ROLE IF EXISTS {}", self.names());
        sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(&self.admin).await.unwrap();
    }

    fn names(&self) -> String {
        let mut names = Vec::new();
        for role in [As::Operator, As::Reader, As::Service, As::Migrator] {
            let group = self.group(role).to_owned();
            names.push(format!("\"{group}_login\""));
            names.push(format!("\"{group}\""));
        }
        names.push(format!("\"{}_admin\"", self.roles.migrator.trim_end_matches("_migrator")));
        names.join(", ")
    }
}

/// Everything an action could have written, to compare before and after a refused one.
async fn snapshot(admin: &PgPool) -> String {
    sqlx::query_scalar(
        "SELECT concat_ws(' | ', \
           (SELECT string_agg(concat_ws(',', id, status, payload::text, redrive_count, lease_token), ';' ORDER BY id) FROM dq.dlq_events), \
           (SELECT count(*) FROM dq.dlq_audit), (SELECT count(*) FROM dq.dlq_attempts), \
           (SELECT count(*) FROM dq.dlq_operations), (SELECT count(*) FROM dq.dlq_erasures))",
    )
    .fetch_one(admin)
    .await
    .unwrap()
}

fn discard(id: DlqId, actor: &str) -> BatchAction {
    let note = AuditNote::new(actor, "duplicate");
    BatchAction { action: ActionKind::Discard, ids: vec![id], note, max_redrives: None, step: None }
}

/// The one line of a refused action: names the role and what PostgreSQL found missing.
fn assert_denied<T: std::fmt::Debug>(result: dlq_core::store::StoreResult<T>, role: &str, action: &str, missing: &str) {
    let err = result.expect_err(action);
    let line = dlq_core::admin::one_line(&err);
    assert!(line.contains(&format!("permission denied: role `{role}` may not {action}")), "{line}");
    assert!(line.contains(missing), "{line}");
    assert!(!line.contains('\n'), "one line: {line}");
}

/// `dlq migrate` as a non-superuser that owns only its schema (no CREATE on the database, no
/// superuser, no extension), the roles run again for the new tables, then the service parks
/// and retries, and is refused the operator's actions, each with nothing written.
#[sqlx::test(migrations = false)]
async fn the_service_parks_and_retries_but_may_not_act(admin: PgPool) {
    let deployment = Deployment::new(&admin).await;
    let migrator = deployment.pool(As::Migrator);
    dlq_sqlx::postgres::migrate(&migrator, SCHEMA).await.expect("migrations as the schema's owner");
    apply_roles(&deployment.manager, SCHEMA, &deployment.roles).await.expect("roles after the migrations");
    apply_roles(&deployment.manager, SCHEMA, &deployment.roles).await.expect("re-runnable");
    let owners: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT pg_get_userbyid(relowner)::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'dq'",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(owners, vec![deployment.roles.migrator.clone()]);

    let service = deployment.store(As::Service).await;
    let role = format!("{}_login", deployment.roles.service);
    let parked = service.park(letter("payment", 1)).await.expect("the service parks");
    let claimed = service.claim(request(&["payment"], 10, Duration::from_secs(30))).await.expect("and claims");
    assert_eq!(claimed.len(), 1);
    let ok = claimed.iter().find(|c| c.lease.id == parked.id).unwrap();
    service.settle(vec![Settlement::Succeeded { lease: ok.lease }]).await.expect("and settles");
    service.maintain().await.expect("and folds the tallies (dlq_fold_tallies runs as its owner)");
    assert_eq!(service.purge(Duration::ZERO).await.expect("and purges finished rows"), 1);
    let kept = service.park(letter("payment", 2)).await.unwrap();

    let before = snapshot(&admin).await;
    assert_denied(service.apply(discard(kept.id, "svc")).await, &role, "discard or redrive rows", "dlq_audit");
    let payload = Payload::Json(serde_json::json!({"n": 3}));
    let patch = PatchRequest { id: kept.id, payload, note: AuditNote::new("svc", "fix"), patch: None, undo_of: None };
    assert_denied(service.patch(patch).await, &role, "patch a payload", "dlq_");
    assert_denied(service.audit(kept.id).await, &role, "read the audit log", "dlq_audit");
    let subject = SubjectHash::from_hex("7".repeat(64)).unwrap();
    let erase = EraseRequest::new(subject, AuditNote::new("svc", "gdpr"));
    assert_denied(service.erase(erase).await, &role, "erase a subject", "dlq_erasures");
    assert_eq!(snapshot(&admin).await, before, "nothing of a refused action was written");

    // The operator does what the service may not; operator-read only reads.
    let reader = deployment.store(As::Reader).await;
    assert_eq!(reader.get(kept.id).await.unwrap().unwrap().id, kept.id);
    assert!(reader.audit(kept.id).await.unwrap().is_empty());
    let reader_role = format!("{}_login", deployment.roles.operator_read);
    assert_denied(reader.apply(discard(kept.id, "ro")).await, &reader_role, "discard or redrive rows", "dlq_events");
    assert_denied(reader.park(letter("payment", 4)).await, &reader_role, "park", "dlq_");
    assert_eq!(snapshot(&admin).await, before);
    let operator = deployment.store(As::Operator).await;
    assert_eq!(operator.apply(discard(kept.id, "op")).await.expect("the operator discards").moved.len(), 1);
    assert_eq!(operator.audit(kept.id).await.unwrap().len(), 1);

    for store in [service, reader, operator] {
        store.pool().close().await;
    }
    migrator.close().await;
    deployment.drop().await;
}

/// The roles' SQL names only validated identifiers, and refuses anything else.
#[test]
fn role_names_are_validated() {
    for bad in ["", "Dlq", "a b", "x\"; DROP ROLE postgres; --", "pg_x", &"p".repeat(50)] {
        assert!(Roles::with_prefix(bad).is_err(), "{bad:?}");
    }
    let roles = Roles::with_prefix("dlq").unwrap();
    assert!(roles_sql("bad schema", &roles).is_err());
    let sql = roles_sql("dq", &roles).unwrap();
    assert!(!sql.contains('{'), "every placeholder filled: {sql}");
}
