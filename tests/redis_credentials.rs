//! A Redis that refuses or wants credentials, or whose ACL user lacks a
//! permission, is `PROVIDER_FAILED` with a message and fix about
//! authentication that name the user (never the password), not "Redis is
//! unreachable": on one server, through Sentinel (the sentinels' own
//! password too) and on a Cluster.

mod support;

use dokebi_lock::{ErrorCode, LockError, Provider};
use futures::executor::block_on;
use support::cluster::Cluster;
use support::redis_server::RedisServer;
use support::sentinel::Sentinels;
use support::{eventually, open_redis, open_redis_at, wait};

/// The password no message, fix or cause may show.
const PASSWORD: &str = "s3cret-pw";

fn refused(provider: &Provider) -> LockError {
    block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).expect_err("the server refuses")
}

/// The error is an authentication failure: `PROVIDER_FAILED`, not
/// unreachable, `message` and `fix` containing the given texts, no
/// password anywhere.
fn assert_authentication(err: &LockError, message: &[&str], fix: &[&str]) {
    assert_eq!(err.code(), ErrorCode::ProviderFailed, "{err:?}");
    assert!(!err.message().contains("unreachable"), "not unreachable: {err:?}");
    for text in message {
        assert!(err.message().contains(text), "message has {text:?}: {err:?}");
    }
    for text in fix {
        assert!(err.fix().contains(text), "fix has {text:?}: {}", err.fix());
    }
    assert_ne!(err.fix(), ErrorCode::ProviderFailed.fix(), "a fix of its own");
    let everything = format!("{err:?} {} {}", err.fix(), err.cause().map(ToString::to_string).unwrap_or_default());
    assert!(!everything.contains(PASSWORD) && !everything.contains("wrong-pw"), "no password: {everything}");
}

fn server_with_password() -> RedisServer {
    RedisServer::start_with(&["--requirepass", PASSWORD])
}

#[test]
fn a_wrong_password_is_refused_credentials_of_the_default_user() {
    let server = server_with_password();
    let (provider, _) = open_redis(&format!("redis://:wrong-pw@127.0.0.1:{}/0", server.port()), &[("leaseMs", "10000")], &[]);
    let err = refused(&provider);
    assert_authentication(
        &err,
        &["refused the credentials of user \"default\"", &format!("127.0.0.1:{}", server.port())],
        &["user \"default\"", "connections.main.url"],
    );
}

#[test]
fn a_user_that_does_not_exist_is_refused_credentials_of_that_user() {
    let server = RedisServer::start();
    let (provider, _) = open_redis(&format!("redis://ghost:wrong-pw@127.0.0.1:{}/0", server.port()), &[("leaseMs", "10000")], &[]);
    assert_authentication(&refused(&provider), &["refused the credentials of user \"ghost\""], &["user \"ghost\""]);
}

#[test]
fn no_password_for_a_server_that_wants_one_says_the_url_gives_none() {
    let server = server_with_password();
    let (provider, _) = open_redis(&server.url(), &[("leaseMs", "10000")], &[]);
    let err = refused(&provider);
    assert_authentication(&err, &["requires a password", "connections.main.url"], &["connections.main.url", "requirepass"]);
    // Every later acquire says the same (no protocol error on a half-open connection).
    assert_authentication(&refused(&provider), &["requires a password"], &[]);
}

#[test]
fn the_right_password_works() {
    let server = server_with_password();
    let (provider, _) = open_redis(&format!("redis://:{PASSWORD}@127.0.0.1:{}/0", server.port()), &[("leaseMs", "10000")], &[]);
    let lease = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).expect("authenticated");
    assert!(block_on(lease.release()).unwrap());
}

#[test]
fn an_acl_user_without_the_lock_s_keys_is_told_which_permissions_to_grant_at_the_first_command() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", &format!(">{PASSWORD}"), "~other:*", "&*", "+@all"])
        .query(&mut server.client())
        .unwrap();
    let (provider, _) = open_redis(&format!("redis://app:{PASSWORD}@127.0.0.1:{}/0", server.port()), &[("leaseMs", "10000")], &[]);
    let err = refused(&provider);
    assert_authentication(&err, &["user \"app\"", "lacks a permission"], &["ACL SETUSER app", "~<namespace>:*"]);
    assert!(err.cause().unwrap().to_string().to_uppercase().contains("NOPERM"), "the cause is the server's refusal: {err:?}");
}

#[test]
fn an_acl_user_without_evalsha_is_told_which_permissions_to_grant() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", &format!(">{PASSWORD}"), "~*", "&*", "+@all", "-evalsha"])
        .query(&mut server.client())
        .unwrap();
    let (provider, _) = open_redis(&format!("redis://app:{PASSWORD}@127.0.0.1:{}/0", server.port()), &[("leaseMs", "10000")], &[]);
    assert_authentication(&refused(&provider), &["user \"app\"", "lacks a permission"], &["+@scripting"]);
}

#[test]
fn a_sentinel_that_refuses_its_own_credentials_is_named_with_its_user() {
    let sentinels = Sentinels::start();
    let nodes: Vec<String> = sentinels.urls().iter().map(|url| url.replace("redis://", "redis://ghost:wrong-pw@")).collect();
    let endpoint = format!("sentinel: {{ nodes: [{}], primaryName: mymaster }}", nodes.join(", "));
    let (provider, _) = open_redis_at(&endpoint, &[("leaseMs", "10000")], &[]);
    assert_authentication(
        &refused(&provider),
        &["the sentinel at 127.0.0.1:", "user \"ghost\""],
        &["connections.main.sentinel.nodes.", "the sentinel's own"],
    );
}

#[test]
fn a_primary_behind_sentinel_that_refuses_the_credentials_names_the_sentinel_options() {
    let sentinels = Sentinels::start();
    let endpoint =
        format!("sentinel: {{ nodes: [{}], primaryName: mymaster, username: ghost, password: wrong-pw }}", sentinels.urls().join(", "));
    let (provider, _) = open_redis_at(&endpoint, &[("leaseMs", "10000")], &[]);
    assert_authentication(
        &refused(&provider),
        &["refused the credentials of user \"ghost\""],
        &["connections.main.sentinel (username, password)"],
    );
}

#[test]
fn a_cluster_that_refuses_the_credentials_names_the_first_seed_s_url() {
    let cluster = Cluster::start();
    let nodes: Vec<String> = cluster.urls().iter().map(|url| url.replace("redis://", "redis://ghost:wrong-pw@")).collect();
    let (provider, _) = open_redis_at(&format!("cluster: {{ nodes: [{}] }}", nodes.join(", ")), &[("leaseMs", "10000")], &[]);
    assert_authentication(&refused(&provider), &["refused the credentials of user \"ghost\""], &["connections.main.cluster.nodes.0"]);
}

/// The first seed's credentials apply to every node, the release
/// subscriptions' too: a seed written without them is still subscribed.
#[test]
fn a_cluster_s_first_seed_credentials_reach_every_seed_s_release_subscription() {
    let cluster = Cluster::start();
    let authenticated = |port: u16| redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{port}")).unwrap().get_connection().unwrap();
    for port in cluster.ports() {
        let mut node = cluster.client(port);
        let _: () = redis::cmd("CONFIG").arg("SET").arg("masterauth").arg(PASSWORD).query(&mut node).unwrap();
        let _: () = redis::cmd("CONFIG").arg("SET").arg("requirepass").arg(PASSWORD).query(&mut node).unwrap();
    }
    let mut nodes = cluster.urls();
    nodes[0] = nodes[0].replace("redis://", &format!("redis://:{PASSWORD}@"));
    let (provider, _) = open_redis_at(&format!("cluster: {{ nodes: [{}] }}", nodes.join(", ")), &[("leaseMs", "10000")], &[]);
    let lease = block_on(provider.backend("shared").unwrap().acquire("k", wait(0))).expect("commands carry the first seed's password");
    assert!(block_on(lease.release()).unwrap());
    eventually("every seed has the release subscription", || {
        cluster.ports().into_iter().all(|port| {
            let channels: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").query(&mut authenticated(port)).unwrap();
            !channels.is_empty()
        })
    });
    block_on(provider.close());
}

#[test]
fn passwords_never_appear_in_the_options_debug_text() {
    let yaml = support::redis_yaml_at(
        &format!("sentinel: {{ nodes: ['redis://s:{PASSWORD}@127.0.0.1:1'], primaryName: m, username: app, password: {PASSWORD} }}"),
        "        leaseMs: 10000\n",
        "",
    );
    let text = format!("{:?}", dokebi_lock::Options::from_yaml(&yaml).unwrap());
    assert!(!text.contains(PASSWORD), "{text}");
    let yaml = support::redis_yaml(&format!("redis://app:{PASSWORD}@127.0.0.1:1/0"), "        leaseMs: 10000\n", "");
    let text = format!("{:?}", dokebi_lock::Options::from_yaml(&yaml).unwrap());
    assert!(!text.contains(PASSWORD) && text.contains("redis://app:<redacted>@127.0.0.1:1/0"), "{text}");
}
