//! The option loader: every field, default and range of the declaration, all
//! problems reported at once, and the committed schema in step with the code.

use dokebi_lock::options::declaration::{json_schema, Fallback, Kind, LOCAL_FIELDS, REDIS_FIELDS};
use dokebi_lock::options::{BackendOptions, Endpoint, LocalOptions, Options, SentinelOptions, Thresholds};
use dokebi_lock::ErrorCode;
use serde_json::json;

const SEED_FILE: &str = r#"
schemaVersion: 1
options:
  dokebi-lock:
    backends:
      orders:
        driver: local # may be omitted
        maxKeys: 10000
        maxWaiters: 128
        waitTimeoutMs: 5000
        maxKeyBytes: 1024
      jobs: {}
      shared:
        driver: redis
        connection: main # a name from dokebi-redis.connections
        namespace: my-service
        leaseMs: 10000
  dokebi-redis:
    connections:
      main:
        url: redis://127.0.0.1:6379/0
  dokebi-web:
    port: 8080
"#;

fn issue_paths(err: &dokebi_lock::LockError) -> Vec<String> {
    err.issues().into_iter().map(|i| i.path).collect()
}

#[test]
fn the_seed_file_loads_with_every_default_filled_in() {
    let options = Options::from_yaml(SEED_FILE).unwrap();
    assert_eq!(options.backends.keys().collect::<Vec<_>>(), ["jobs", "orders", "shared"]);
    let BackendOptions::Local(jobs) = &options.backends["jobs"] else { panic!("jobs is local") };
    let thresholds = Thresholds { slow_acquire_ms: Some(5_000), slow_hold_ms: Some(60_000) };
    assert_eq!(*jobs, LocalOptions { max_keys: 10_000, max_waiters: 128, wait_timeout_ms: 5_000, max_key_bytes: 1_024, thresholds });
    let BackendOptions::Redis(shared) = &options.backends["shared"] else { panic!("shared is redis") };
    assert_eq!(shared.connection, "main");
    assert_eq!(shared.namespace, "my-service");
    assert_eq!(shared.lease_ms, 10_000);
    assert_eq!((shared.wait_timeout_ms, shared.poll_interval_ms, shared.notify_poll_interval_ms), (5_000, 25, 250));
    assert_eq!((shared.max_waiters, shared.max_leases, shared.max_key_bytes, shared.shutdown_timeout_ms), (4_096, 10_000, 1_024, 5_000));
    assert_eq!(shared.thresholds, thresholds);
    let main = &options.connections["main"];
    assert_eq!(main.endpoint, Endpoint::Server { url: "redis://127.0.0.1:6379/0".into() });
    assert_eq!((main.connect_timeout_ms, main.command_timeout_ms), (5_000, 2_000));
}

#[test]
fn the_parsed_options_map_and_the_sections_load_the_same() {
    let from_file = Options::from_yaml(SEED_FILE).unwrap();
    let document: serde_json::Value = serde_yaml_ng::from_str(SEED_FILE).unwrap();
    let config = &document["options"];
    assert_eq!(Options::from_config(config).unwrap(), from_file);
    assert_eq!(Options::from_sections(Some(&config["dokebi-lock"]), Some(&config["dokebi-redis"]), None, None).unwrap(), from_file);
}

#[test]
fn the_postgres_section_given_apart_opens_a_postgres_backend_as_the_whole_map_does() {
    let lock = json!({ "backends": { "pg": { "driver": "postgres", "connection": "main", "leaseMs": 10000 } } });
    let postgres = json!({ "connections": { "main": { "url": "postgres://app@127.0.0.1:5432/app" } } });
    let apart = Options::from_sections(Some(&lock), None, Some(&postgres), None).unwrap();
    assert_eq!(apart, Options::from_config(&json!({ "dokebi-lock": lock, "dokebi-postgres": postgres })).unwrap());
    assert!(matches!(apart.backends["pg"], BackendOptions::Postgres(_)));
    // Without its section the backend names no connection.
    let err = Options::from_sections(Some(&lock), None, None, None).unwrap_err();
    assert_eq!(err.code(), ErrorCode::UnknownConnection);
}

#[test]
fn the_mysql_section_given_apart_opens_a_mysql_backend_as_the_whole_map_does() {
    let lock = json!({ "backends": { "my": { "driver": "mysql", "connection": "main", "leaseMs": 10000 } } });
    let mysql = json!({ "connections": { "main": { "url": "mysql://app@127.0.0.1:3306/app" } } });
    let apart = Options::from_sections(Some(&lock), None, None, Some(&mysql)).unwrap();
    assert_eq!(apart, Options::from_config(&json!({ "dokebi-lock": lock, "dokebi-mysql": mysql })).unwrap());
    assert!(matches!(apart.backends["my"], BackendOptions::Mysql(_)));
    let err = Options::from_sections(Some(&lock), None, None, None).unwrap_err();
    assert_eq!(err.code(), ErrorCode::UnknownConnection);
}

#[test]
fn every_problem_is_reported_at_once_with_its_path() {
    let err = Options::from_config(&json!({
        "dokebi-lock": { "backends": {
            "a": { "maxKeys": 0, "maxWaiters": -1, "waitTimeoutMs": "soon", "colour": "red" },
            "b": { "driver": "redis", "connection": "main", "pollIntervalMs": 1.5 },
            "c": { "driver": "redis", "connection": "main", "leaseMs": 1000, "maxWaiters": 100001 },
            "d": 7
        }},
        "dokebi-redis": { "connections": { "main": { "url": "http://x" } } }
    }))
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    let mut paths = issue_paths(&err);
    paths.sort();
    assert_eq!(
        paths,
        [
            "backends.a.colour",
            "backends.a.maxKeys",
            "backends.a.maxWaiters",
            "backends.a.waitTimeoutMs",
            "backends.b.leaseMs",
            "backends.b.pollIntervalMs",
            "backends.c.maxWaiters",
            "backends.d",
            "connections.main.url",
        ]
    );
    assert!(err.issues().iter().all(|i| !i.message.is_empty()));
}

#[test]
fn each_integer_field_rejects_values_just_outside_its_range() {
    for (driver, table) in [("local", LOCAL_FIELDS), ("redis", REDIS_FIELDS)] {
        for field in table {
            let Kind::Integer { min, max } = field.kind else { continue };
            let mut outside = vec![json!(max + 1), json!(1.5), json!("1"), json!(true)];
            if min > 0 {
                outside.push(json!(min - 1));
            } else {
                outside.push(json!(-1));
            }
            for value in outside {
                // commandTimeoutMs 1: below every leaseMs in range.
                let mut backend = json!({ "driver": driver, "connection": "main", "leaseMs": 1000 });
                if driver == "local" {
                    backend = json!({});
                }
                backend[field.name] = value.clone();
                let err = Options::from_sections(
                    Some(&json!({ "backends": { "x": backend } })),
                    Some(&json!({ "connections": { "main": { "url": "redis://h", "commandTimeoutMs": 1 } } })),
                    None,
                    None,
                )
                .expect_err(&format!("{driver}.{} = {value} is accepted", field.name));
                assert_eq!(issue_paths(&err), [format!("backends.x.{}", field.name)]);
            }
            for value in [min, max] {
                let mut backend =
                    if driver == "local" { json!({}) } else { json!({ "driver": driver, "connection": "main", "leaseMs": 1000 }) };
                backend[field.name] = json!(value);
                Options::from_sections(
                    Some(&json!({ "backends": { "x": backend } })),
                    Some(&json!({ "connections": { "main": { "url": "redis://h", "commandTimeoutMs": 1 } } })),
                    None,
                    None,
                )
                .unwrap_or_else(|e| panic!("{driver}.{} = {value} is rejected: {e}", field.name));
            }
        }
    }
}

#[test]
fn telemetry_thresholds_take_null_to_disable() {
    let options =
        Options::from_config(&json!({ "dokebi-lock": { "backends": { "a": { "slowAcquireMs": null, "slowHoldMs": 0 } } } })).unwrap();
    let BackendOptions::Local(a) = &options.backends["a"] else { panic!("local") };
    assert_eq!(a.thresholds, Thresholds { slow_acquire_ms: None, slow_hold_ms: Some(0) });
    let err =
        Options::from_config(&json!({ "dokebi-lock": { "backends": { "a": { "slowHoldMs": -1, "slowAcquireMs": "1" } } } })).unwrap_err();
    assert_eq!(issue_paths(&err), ["backends.a.slowAcquireMs", "backends.a.slowHoldMs"]);
}

#[test]
fn redis_backends_require_lease_ms() {
    let required: Vec<&str> = REDIS_FIELDS.iter().filter(|f| matches!(f.fallback, Fallback::Required)).map(|f| f.name).collect();
    assert_eq!(required, ["leaseMs"]);
    let err = Options::from_sections(
        Some(&json!({ "backends": { "shared": { "driver": "redis", "connection": "main" } } })),
        Some(&json!({ "connections": { "main": { "url": "redis://h" } } })),
        None,
        None,
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(issue_paths(&err), ["backends.shared.leaseMs"]);
}

#[test]
fn a_connection_that_names_nothing_is_unknown_connection() {
    let err = Options::from_sections(
        Some(&json!({ "backends": { "shared": { "driver": "redis", "connection": "nope", "leaseMs": 1000 } } })),
        None,
        None,
        None,
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::UnknownConnection);
    assert_eq!(issue_paths(&err), ["backends.shared.connection"]);
}

#[test]
fn an_unknown_connection_among_other_problems_is_listed_with_them() {
    let err = Options::from_sections(
        Some(&json!({ "backends": { "shared": { "driver": "redis", "connection": "nope", "leaseMs": 1000 }, "a": { "maxKeys": 0 } } })),
        None,
        None,
        None,
    )
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(issue_paths(&err).len(), 2);
}

#[test]
fn the_file_needs_schema_version_1_and_nothing_unknown_at_the_top() {
    for (text, path) in [
        ("schemaVersion: 2\noptions: {}\n", "schemaVersion"),
        ("options: {}\n", "schemaVersion"),
        ("schemaVersion: 1\n", "options"),
        ("schemaVersion: 1\noptions: {}\nextra: 1\n", "extra"),
        ("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backend: {}\n", "backend"),
        ("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends: []\n", "backends"),
        ("- 1\n", ""),
        ("schemaVersion: [1\n", ""),
    ] {
        let err = Options::from_yaml(text).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidOptions, "{text}");
        assert_eq!(issue_paths(&err)[0], path, "{text}");
    }
}

#[test]
fn a_top_level_issue_reads_as_its_message_alone() {
    let err = Options::from_yaml("- 1\n").unwrap_err();
    assert_eq!(issue_paths(&err), [""]);
    assert_eq!(err.message(), "invalid options: expected a mapping with schemaVersion and options");
    let err = Options::from_yaml("schemaVersion: [1\n").unwrap_err();
    assert!(err.message().starts_with("invalid options: not valid YAML at line "), "{}", err.message());
}

#[test]
fn app_drivers_pass_their_settings_through() {
    let options =
        Options::from_config(&json!({ "dokebi-lock": { "backends": { "pg": { "driver": "dynamo", "table": "locks" } } } })).unwrap();
    let BackendOptions::App { driver, settings } = &options.backends["pg"] else { panic!("app driver") };
    assert_eq!(driver, "dynamo");
    assert_eq!(settings["table"], "locks");
    let err = Options::from_config(&json!({ "dokebi-lock": { "backends": { "x": { "driver": 3 } } } })).unwrap_err();
    assert_eq!(issue_paths(&err), ["backends.x.driver"]);
}

#[test]
fn the_committed_schema_matches_the_declaration() {
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/options.schema.json")).unwrap();
    let generated = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
    assert!(committed == generated, "options.schema.json is stale: run cargo build and commit it");
}

#[test]
fn the_schema_states_every_declared_default_and_range() {
    let schema = json_schema();
    let local = &schema["properties"]["options"]["properties"]["dokebi-lock"]["properties"]["backends"]["additionalProperties"]["anyOf"][0];
    for field in LOCAL_FIELDS {
        let property = &local["properties"][field.name];
        let Kind::Integer { min, max } = field.kind else { continue };
        assert_eq!(property["minimum"], json!(min), "{}", field.name);
        assert_eq!(property["maximum"], json!(max), "{}", field.name);
    }
    let redis = &schema["properties"]["options"]["properties"]["dokebi-lock"]["properties"]["backends"]["additionalProperties"]["anyOf"][1];
    assert_eq!(redis["required"], json!(["driver", "leaseMs"]));
}

#[test]
fn a_redis_lease_not_above_its_connection_command_timeout_is_invalid_options() {
    let connections = json!({ "connections": { "main": { "url": "redis://h", "commandTimeoutMs": 1000 }, "quick": { "url": "redis://h", "commandTimeoutMs": 100 } } });
    let backends = json!({ "backends": {
        "equal": { "driver": "redis", "connection": "main", "leaseMs": 1000 },
        "below": { "driver": "redis", "connection": "main", "leaseMs": 500 },
        "fine": { "driver": "redis", "connection": "quick", "leaseMs": 500 },
    } });
    let err = Options::from_sections(Some(&backends), Some(&connections), None, None).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(issue_paths(&err), ["backends.below.leaseMs", "backends.equal.leaseMs"]);
    // The default commandTimeoutMs (2000) counts too.
    let err = Options::from_sections(
        Some(&json!({ "backends": { "x": { "driver": "redis", "connection": "main", "leaseMs": 2000 } } })),
        Some(&json!({ "connections": { "main": { "url": "redis://h" } } })),
        None,
        None,
    )
    .unwrap_err();
    assert_eq!(issue_paths(&err), ["backends.x.leaseMs"]);
}

/// Review R67: tables `t` and `t_holders` of one schema were one table
/// (`t`'s holders, `t_holders`'s keys), and whichever installed second
/// failed every first operation with PROVIDER_FAILED, naming nothing. Every
/// name the drivers make beside a table ends with one of these.
#[test]
fn a_table_named_like_what_is_made_beside_another_is_invalid_options() {
    let postgres = json!({ "connections": { "main": { "url": "postgres://h/app" } } });
    let mysql = json!({ "connections": { "main": { "url": "mysql://h/app" } } });
    let backends = json!({ "backends": {
        "keys": { "driver": "postgres", "connection": "main", "leaseMs": 10000, "table": "t" },
        "holders": { "driver": "postgres", "connection": "main", "leaseMs": 10000, "table": "t_holders" },
        "waiting": { "driver": "postgres", "connection": "main", "leaseMs": 10000, "table": "t_waiting" },
        "index": { "driver": "postgres", "connection": "main", "leaseMs": 10000, "table": "t_fence_until" },
        "primary": { "driver": "postgres", "connection": "main", "leaseMs": 10000, "table": "t_pkey" },
        "released": { "driver": "postgres", "connection": "main", "leaseMs": 10000, "table": "t_released" },
        "my_keys": { "driver": "mysql", "connection": "main", "leaseMs": 10000, "table": "t" },
        "my_holders": { "driver": "mysql", "connection": "main", "leaseMs": 10000, "table": "t_holders" },
        "my_released": { "driver": "mysql", "connection": "main", "leaseMs": 10000, "table": "t_released" },
        "my_primary": { "driver": "mysql", "connection": "main", "leaseMs": 10000, "table": "t_pkey" },
    } });
    let err = Options::from_sections(Some(&backends), None, Some(&postgres), Some(&mysql)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    assert_eq!(
        issue_paths(&err),
        [
            "backends.holders.table",
            "backends.index.table",
            "backends.my_holders.table",
            "backends.my_released.table",
            "backends.primary.table",
            "backends.waiting.table"
        ]
    );
    assert!(err.to_string().contains("must not end with _holders, _waiting, _fence_until, _pkey"), "{err}");
}

#[test]
fn a_connection_names_one_server_a_sentinel_deployment_or_a_cluster() {
    let options = Options::from_config(&json!({
        "dokebi-redis": { "connections": {
            "one": { "url": "redis://127.0.0.1:6379/0" },
            "ha": { "sentinel": { "nodes": ["redis://10.0.0.1:26379", "rediss://:s3cret@10.0.0.2:26379"], "primaryName": "mymaster", "password": "p", "db": 2, "tls": true } },
            "many": { "cluster": { "nodes": ["redis://10.0.0.1:7000"] }, "commandTimeoutMs": 500 },
        } },
    }))
    .unwrap();
    assert_eq!(options.connections["one"].endpoint, Endpoint::Server { url: "redis://127.0.0.1:6379/0".into() });
    assert_eq!(
        options.connections["ha"].endpoint,
        Endpoint::Sentinel(SentinelOptions {
            nodes: vec!["redis://10.0.0.1:26379".into(), "rediss://:s3cret@10.0.0.2:26379".into()],
            primary_name: "mymaster".into(),
            username: None,
            password: Some("p".into()),
            db: 2,
            tls: true,
        })
    );
    assert_eq!(options.connections["many"].endpoint, Endpoint::Cluster { nodes: vec!["redis://10.0.0.1:7000".into()] });
    assert_eq!(options.connections["many"].command_timeout_ms, 500);
}

#[test]
fn a_connection_needs_exactly_one_endpoint_and_valid_topology_fields() {
    let err = Options::from_config(&json!({
        "dokebi-redis": { "connections": {
            "none": { "connectTimeoutMs": 100 },
            "two": { "url": "redis://h", "cluster": { "nodes": ["redis://h:7000"] } },
            "empty": { "cluster": { "nodes": [] } },
            "bad": { "sentinel": { "nodes": ["http://h"], "tls": "yes", "colour": 1 } },
            "flat": { "sentinel": "redis://h" },
        } },
    }))
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOptions);
    let mut paths = issue_paths(&err);
    paths.sort();
    assert_eq!(
        paths,
        [
            "connections.bad.sentinel.colour",
            "connections.bad.sentinel.nodes",
            "connections.bad.sentinel.primaryName",
            "connections.bad.sentinel.tls",
            "connections.empty.cluster.nodes",
            "connections.flat.sentinel",
            "connections.none",
            "connections.two",
        ]
    );
}

#[test]
fn postgres_backends_read_their_connection_table_and_store_fields() {
    let options = Options::from_yaml(
        "schemaVersion: 1
options:
  dokebi-postgres:
    connections:
      main: { url: 'postgres://app:pw@db/app', listenUrl: 'postgres://app:pw@db-direct/app', poolSize: 4 }
  dokebi-lock:
    backends:
      jobs: { driver: postgres, connection: main, leaseMs: 5000, schema: locks, table: leases, autoCreate: false }
",
    )
    .unwrap();
    let BackendOptions::Postgres(jobs) = &options.backends["jobs"] else { panic!("a postgres backend") };
    assert_eq!((jobs.schema.as_str(), jobs.table.as_str(), jobs.auto_create), ("locks", "leases", false));
    assert_eq!((jobs.store.lease_ms, jobs.store.namespace.as_str(), jobs.store.replica_acks), (5000, "dokebi-lock", 0));
    let main = &options.postgres["main"];
    assert_eq!((main.pool_size, main.listen_url.as_deref()), (4, Some("postgres://app:pw@db-direct/app")));
    assert!(!format!("{main:?}").contains(":pw@"), "Debug hides the password");
}

#[test]
fn mysql_backends_read_their_connection_table_and_store_fields_and_are_checked_alike() {
    let options = Options::from_yaml(
        "schemaVersion: 1
options:
  dokebi-mysql:
    connections:
      main: { url: 'mysql://app:pw@db:3306/app?ssl-mode=REQUIRED', poolSize: 8 }
  dokebi-lock:
    backends:
      jobs: { driver: mysql, connection: main, leaseMs: 5000, table: leases, autoCreate: false }
",
    )
    .unwrap();
    let BackendOptions::Mysql(jobs) = &options.backends["jobs"] else { panic!("a mysql backend") };
    assert_eq!((jobs.table.as_str(), jobs.auto_create, jobs.store.lease_ms), ("leases", false, 5000));
    let main = &options.mysql["main"];
    assert_eq!((main.pool_size, main.command_timeout_ms), (8, 2000));
    assert!(!format!("{main:?}").contains(":pw@"), "Debug hides the password");
    let cases = [
        ("{ driver: mysql, connection: nope, leaseMs: 5000 }", "backends.shared.connection"),
        ("{ driver: mysql, connection: main, leaseMs: 1000 }", "backends.shared.leaseMs"),
        ("{ driver: mysql, connection: main, leaseMs: 5000, table: 'a`; drop' }", "backends.shared.table"),
        ("{ driver: mysql, connection: main, leaseMs: 5000, schema: other }", "backends.shared.schema"),
    ];
    for (backend, path) in cases {
        let text = format!(
            "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: {{ url: 'mysql://db/app', commandTimeoutMs: 2000 }}\n  dokebi-lock:\n    backends:\n      shared: {backend}\n"
        );
        let err = Options::from_yaml(&text).unwrap_err();
        assert_eq!(issue_paths(&err)[0], path, "{text}");
    }
    let text = "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: { url: 'postgres://db/app' }\n";
    assert_eq!(issue_paths(&Options::from_yaml(text).unwrap_err()), ["dokebi-mysql.connections.main.url"]);
}

#[test]
fn postgres_backends_are_checked_like_redis_ones() {
    let cases = [
        ("{ driver: postgres, connection: nope, leaseMs: 5000 }", "backends.shared.connection"),
        ("{ driver: postgres, connection: main, leaseMs: 1000 }", "backends.shared.leaseMs"),
        ("{ driver: postgres, connection: main, leaseMs: 5000, table: 'a\"; drop' }", "backends.shared.table"),
        ("{ driver: postgres, connection: main, leaseMs: 5000, replicaAcks: 1 }", "backends.shared.replicaAcks"),
    ];
    for (backend, path) in cases {
        let text = format!(
            "schemaVersion: 1\noptions:\n  dokebi-postgres:\n    connections:\n      main: {{ url: 'postgres://db/app', commandTimeoutMs: 2000 }}\n  dokebi-lock:\n    backends:\n      shared: {backend}\n"
        );
        let err = Options::from_yaml(&text).unwrap_err();
        assert_eq!(issue_paths(&err)[0], path, "{text}");
    }
}
