//! The pairing relay's rules, over HTTP: one join per slot, bounded
//! messages, slots only their two devices can read, rate limits, and a
//! finished slot that keeps nothing (the devices' side is the e2e test
//! `pairing`).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Api, TestServer};

const B64_OF_1: &str = "AQ==";

async fn open(api: &Api) -> u64 {
    let (st, v) = api.post("/api/v1/pair", json!({"offer": B64_OF_1})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["slot"].as_u64().unwrap()
}

/// `POST /pair/{slot}/{step}` with `body`: its answer.
async fn post_step(api: &Api, slot: u64, step: &str, body: Value) -> (StatusCode, Value) {
    api.post(&format!("/api/v1/pair/{slot}/{step}"), body).await
}

/// A step refused as out of turn: 409 `pairing_state`.
fn out_of_turn((st, v): (StatusCode, Value)) {
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::CONFLICT, &json!("pairing_state")),
        "{v}"
    );
}

async fn wait(api: &Api, slot: u64, state: &str) -> (StatusCode, Value) {
    api.get(&format!("/api/v1/pair/{slot}/wait?state={state}&timeout=1"))
        .await
}

#[tokio::test]
async fn a_slot_takes_one_join_and_only_its_two_devices_read_it() {
    let srv = TestServer::start(&[]);
    let pat = srv.register("pat").await;
    let eve = srv.register("eve").await;
    let anon = srv.anon();
    let slot = open(&pat).await;
    let other = open(&pat).await;
    assert_ne!(slot, other, "two live slots never share a number");

    let (st, v) = anon.get(&format!("/api/v1/pair/{slot}")).await;
    assert_eq!((st, &v["offer"]), (StatusCode::OK, &json!(B64_OF_1)), "{v}");
    let (st, v) = anon
        .post(
            &format!("/api/v1/pair/{slot}/join"),
            json!({"hello": "Ag=="}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let joiner = anon.with_token(v["secret"].as_str().unwrap());
    // One attempt per code: a second join, or reading the offer, is 409.
    out_of_turn(post_step(&anon, slot, "join", json!({"hello": "Aw=="})).await);
    let (st, _) = anon.get(&format!("/api/v1/pair/{slot}")).await;
    assert_eq!(st, StatusCode::CONFLICT);

    // The creator reads the hello; the joiner sees no message yet; another
    // account's device sees no slot, and no token is no answer.
    let (st, v) = wait(&pat, slot, "open").await;
    assert_eq!(
        (st, &v["state"], &v["message"]),
        (StatusCode::OK, &json!("joined"), &json!("Ag==")),
        "{v}"
    );
    let (st, v) = wait(&joiner, slot, "open").await;
    assert_eq!((st, v.get("message")), (StatusCode::OK, None), "{v}");
    assert_eq!(wait(&eve, slot, "open").await.0, StatusCode::NOT_FOUND);
    assert_eq!(wait(&anon, slot, "open").await.0, StatusCode::UNAUTHORIZED);
    let (st, _) = eve
        .post(
            &format!("/api/v1/pair/{slot}/device"),
            json!({"device": "phone"}),
        )
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    // The joiner's secret is no device token.
    assert_eq!(
        joiner.get("/api/v1/devices").await.0,
        StatusCode::UNAUTHORIZED
    );

    // One slot makes one device. Asked again (the creator's answer was
    // lost, or a stolen token mints devices), it makes a new one in place
    // of the last: the earlier token stops working, the name stays, and
    // the account holds one phone however often it is asked.
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let (st, v) = post_step(&pat, slot, "device", json!({"device": "phone"})).await;
        assert_eq!(
            (st, &v["device_name"]),
            (StatusCode::OK, &json!("phone")),
            "{v}"
        );
        tokens.push(v["token"].as_str().unwrap().to_owned());
    }
    let (last, earlier) = tokens.split_last().unwrap();
    for t in earlier {
        assert_eq!(
            anon.with_token(t).get("/api/v1/devices").await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    let (st, v) = anon.with_token(last).get("/api/v1/devices").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let phones = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["name"].as_str().unwrap().starts_with("phone"))
        .count();
    assert_eq!(phones, 1, "{v}");
    let (st, _) = pat
        .post(
            &format!("/api/v1/pair/{slot}/reply"),
            json!({"reply": "BA=="}),
        )
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) = wait(&joiner, slot, "joined").await;
    assert_eq!(
        (st, &v["state"], &v["message"]),
        (StatusCode::OK, &json!("replied"), &json!("BA==")),
        "{v}"
    );
    let (st, _) = joiner
        .call(Method::DELETE, &format!("/api/v1/pair/{slot}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) = wait(&pat, slot, "replied").await;
    assert_eq!(
        (st, &v["state"], v.get("message")),
        (StatusCode::OK, &json!("done"), None),
        "{v}"
    );
    // Finished: no step applies any more, and the slot's device stays.
    let (st, _) = pat
        .post(
            &format!("/api/v1/pair/{slot}/reply"),
            json!({"reply": "BA=="}),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT);
    out_of_turn(post_step(&pat, slot, "device", json!({"device": "phone"})).await);
    assert_eq!(
        anon.with_token(last).get("/api/v1/devices").await.0,
        StatusCode::OK
    );
}

/// A pairing's long poll counts as a wait: one account parks no more of
/// them than `--max-waiters-per-user` (429 past it, its record waits
/// included), and a step ends the creator's wait with the joiner's hello.
#[tokio::test]
async fn pairing_waits_count_against_the_accounts_share_of_waits() {
    let (srv, metrics) = TestServer::start_with_metrics(&[
        "--max-waiters-per-user",
        "2",
        "--wait-rate-per-device",
        "1000",
    ]);
    let pat = srv.register("pat").await;
    let slots = [open(&pat).await, open(&pat).await, open(&pat).await];
    let parked = |slot: u64| {
        let pat = pat.clone();
        tokio::spawn(async move {
            pat.get(&format!("/api/v1/pair/{slot}/wait?state=open&timeout=20"))
                .await
        })
    };
    let first = parked(slots[0]);
    crate::wait::parked(&metrics, 1.0).await;
    let second = parked(slots[1]);
    crate::wait::parked(&metrics, 2.0).await;
    let third = wait(&pat, slots[2], "open").await;
    assert_eq!(third.0, StatusCode::TOO_MANY_REQUESTS, "{}", third.1);
    let share = |v: &Value| {
        v["message"]
            .as_str()
            .unwrap_or_default()
            .contains("holds 2 waits")
    };
    assert!(share(&third.1), "{}", third.1);
    let (st, v) = pat.get("/api/v1/records/wait?after=0&timeout=1").await;
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(share(&v), "{v}");

    // A join ends the first wait with the hello; the second runs out.
    let (st, v) = srv
        .anon()
        .post(
            &format!("/api/v1/pair/{}/join", slots[0]),
            json!({"hello": "Ag=="}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = first.await.unwrap();
    assert_eq!(
        (st, &v["state"], &v["message"]),
        (StatusCode::OK, &json!("joined"), &json!("Ag==")),
        "{v}"
    );
    // With the first wait given back, the account may wait again.
    crate::wait::parked(&metrics, 1.0).await;
    assert_eq!(wait(&pat, slots[2], "open").await.0, StatusCode::OK);
    second.abort();
}

#[tokio::test]
async fn messages_are_bounded_and_opening_is_rate_limited() {
    let srv = TestServer::start(&["--pair-rate", "2"]);
    let pat = srv.register("pat").await;
    let big = base64_of(&vec![7u8; 4097]);
    let (st, v) = pat.post("/api/v1/pair", json!({"offer": big})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, _) = pat.post("/api/v1/pair", json!({"offer": ""})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    open(&pat).await;
    open(&pat).await;
    let (st, v) = pat.post("/api/v1/pair", json!({"offer": B64_OF_1})).await;
    assert_eq!(
        (st, &v["code"]),
        (StatusCode::TOO_MANY_REQUESTS, &json!("rate_limited")),
        "{v}"
    );
    // Calls without a token are held to the same rate per address.
    let anon = srv.anon();
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(anon.get("/api/v1/pair/999").await.0);
    }
    assert_eq!(
        codes,
        [
            StatusCode::NOT_FOUND,
            StatusCode::NOT_FOUND,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

fn base64_of(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[tokio::test]
async fn a_closed_slot_tells_the_joiner_and_an_expired_one_is_gone() {
    // Long enough for the join to come first on a loaded machine.
    let srv = TestServer::start(&["--pair-ttl", "3"]);
    let pat = srv.register("pat").await;
    let anon = srv.anon();
    let slot = open(&pat).await;
    let (_, v) = anon
        .post(
            &format!("/api/v1/pair/{slot}/join"),
            json!({"hello": "Ag=="}),
        )
        .await;
    let joiner = anon.with_token(v["secret"].as_str().unwrap());
    let (st, _) = pat
        .call(Method::DELETE, &format!("/api/v1/pair/{slot}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) = wait(&joiner, slot, "joined").await;
    assert_eq!((st, &v["state"]), (StatusCode::OK, &json!("closed")), "{v}");
    // The wait on an open slot ends with the slot's lifetime: 404.
    let slot = open(&pat).await;
    let (st, v) = pat
        .get(&format!("/api/v1/pair/{slot}/wait?state=open&timeout=10"))
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let (st, _) = anon.get(&format!("/api/v1/pair/{slot}")).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}
