//! `docker-compose.yml` runs what the tests run and opens no door: the app is the only service
//! it publishes, it starts with an admin token, connects to MariaDB (the engine every test
//! uses) as a user of its own, no password is written in the file, and the Redis that holds
//! stock keeps an append-only file. `docker-compose.servers.yml` publishes the servers for the
//! tests on loopback only.

use serde_norway::Value;

fn load(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut value: Value = serde_norway::from_str(&text).expect("valid YAML");
    value.apply_merge().expect("merge keys");
    value
}

/// The services of the default profile (those without `profiles`), by name.
fn default_services(compose: &Value) -> Vec<(String, Value)> {
    compose["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .filter(|(_, s)| s.get("profiles").is_none())
        .map(|(name, s)| (name.as_str().expect("name").to_string(), s.clone()))
        .collect()
}

fn environment(service: &Value) -> Vec<(String, String)> {
    match service.get("environment") {
        Some(Value::Mapping(m)) => m
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Value::String(s) => s.clone(),
                    other => serde_norway::to_string(other).expect("yaml"),
                };
                (k.as_str().expect("key").to_string(), value)
            })
            .collect(),
        Some(other) => panic!("environment as a mapping, not {other:?}"),
        None => Vec::new(),
    }
}

fn command(service: &Value) -> String {
    match service.get("command") {
        Some(Value::Sequence(parts)) => parts
            .iter()
            .filter_map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

#[test]
fn compose_publishes_only_the_app() {
    let compose = load("docker-compose.yml");
    let published: Vec<String> = default_services(&compose)
        .into_iter()
        .filter(|(_, s)| s.get("ports").is_some() || s.get("network_mode").is_some())
        .map(|(name, _)| name)
        .collect();
    assert_eq!(published, ["app"]);
}

#[test]
fn compose_runs_mariadb_the_engine_the_tests_run() {
    let compose = load("docker-compose.yml");
    let images: Vec<String> = default_services(&compose)
        .iter()
        .filter_map(|(_, s)| s.get("image")?.as_str().map(String::from))
        .collect();
    assert!(
        images.iter().any(|i| i.starts_with("mariadb:")),
        "{images:?}"
    );
    assert!(
        !images.iter().any(|i| i.starts_with("mysql:")),
        "{images:?}"
    );
}

#[test]
fn compose_starts_the_app_with_an_admin_token_and_a_database_user_of_its_own() {
    let compose = load("docker-compose.yml");
    let app = &compose["services"]["app"];
    let env = environment(app);
    let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let token = get("SECKILL_ADMIN_TOKEN").expect("the app gets an admin token");
    assert!(
        token.starts_with("${"),
        "the token comes from outside: {token}"
    );
    let database = get("DATABASE_URL").expect("DATABASE_URL");
    assert!(!database.contains("://root"), "{database}");
}

#[test]
fn compose_writes_no_password_into_the_file() {
    let compose = load("docker-compose.yml");
    for (name, service) in default_services(&compose) {
        for (key, value) in environment(&service) {
            // A key given a default in the file is a secret every reader of it knows.
            let secret = ["PASSWORD", "TOKEN", "KEY"].iter().any(|s| key.contains(s));
            assert!(
                !secret || (value.starts_with("${") && !value.contains(":-")),
                "{name}: {key} is written in the file: {value}"
            );
        }
        let url = environment(&service)
            .into_iter()
            .filter(|(k, _)| k.ends_with("_URL") || k.ends_with("_URLS"));
        for (key, value) in url {
            if let Some((_, after)) = value.split_once("://")
                && let Some((credentials, _)) = after.split_once('@')
                && let Some((_, password)) = credentials.split_once(':')
            {
                assert!(password.starts_with("${"), "{name}: {key} holds a password");
            }
        }
    }
}

#[test]
fn compose_keeps_the_stock_redis_on_an_append_only_file() {
    let compose = load("docker-compose.yml");
    let redis = command(&compose["services"]["redis"]);
    assert!(redis.contains("--appendonly yes"), "{redis}");
    assert!(redis.contains("--appendfsync"), "{redis}");
}

#[test]
fn the_servers_file_publishes_every_server_on_loopback_only() {
    let servers = load("docker-compose.servers.yml");
    let services = servers["services"].as_mapping().expect("services");
    assert!(services.len() >= 5, "{services:?}");
    for (name, service) in services {
        let ports = service["ports"].as_sequence().expect("ports");
        for port in ports {
            let port = port.as_str().expect("a port string");
            assert!(port.starts_with("127.0.0.1:"), "{name:?}: {port}");
        }
    }
}
