//! Tokens and passwords never reach what the server stores (the database
//! file, or the Postgres database and the bucket) or its logs.

use serde_json::json;

use crate::common::{PASSWORD, TestServer, segment};

#[tokio::test]
async fn token_and_password_are_nowhere_in_db_or_logs() {
    let mut srv = TestServer::start_env(&[], &[("EVI_SERVER_LOG", "trace")]);
    let a = srv.register("secretive").await;
    let anon = srv.anon();
    let (_, v) = anon
        .post(
            "/api/v1/login",
            json!({"user": "secretive", "password": PASSWORD, "device": "two"}),
        )
        .await;
    let second = v["token"].as_str().unwrap().to_owned();
    a.push(vec![segment(1, 1, 10)]).await;
    a.get("/api/v1/devices").await;
    anon.with_token(&second).get("/api/v1/status").await;
    anon.with_token(&format!("{second}x"))
        .get("/api/v1/status")
        .await;
    anon.post(
        "/api/v1/login",
        json!({"user": "secretive", "password": "wrong-password", "device": "x"}),
    )
    .await;
    let first = a.token.clone().unwrap();
    // Stop gracefully so everything is flushed.
    let pid = srv.pid().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(srv.terminate_wait().success());

    let log = srv.log();
    assert!(log.contains("logged in"), "logging is on: {log}");
    let mut haystacks = vec![("server.log".to_owned(), log.into_bytes())];
    haystacks.extend(srv.stored_bytes());
    let database = match srv.db {
        Some(_) => "pg_dump of ",
        None => "evi-server.sqlite3",
    };
    assert!(
        haystacks
            .iter()
            .any(|(n, b)| n.contains(database) && b.windows(9).any(|w| w == b"secretive")),
        "the database, holding the account, is searched too"
    );
    for token in [&first, &second] {
        let secret_part = token.trim_start_matches("evi_");
        let raw = hex::decode(secret_part).unwrap();
        for (name, bytes) in &haystacks {
            for needle in [
                secret_part.as_bytes(),
                &raw[..],
                PASSWORD.as_bytes(),
                b"wrong-password",
            ] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "a secret is in {name}"
                );
            }
        }
    }
}
