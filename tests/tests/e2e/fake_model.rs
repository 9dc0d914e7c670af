//! A fake of the model APIs the agents' real clients talk to, on a
//! loopback port: Anthropic's Messages API (`POST /v1/messages`, streamed
//! as server-sent events when asked, and `count_tokens`) for Claude Code,
//! OpenAI's Responses API (`POST /v1/responses`, streamed) for Codex, and
//! Gemini's `generateContent` / `streamGenerateContent` (`?alt=sse`) and
//! `countTokens` (`POST /v1beta/models/<model>:<method>`) for Gemini CLI, and
//! OpenAI's Chat Completions API (`POST /v1/chat/completions`, streamed as
//! `data:` chunks ending in `[DONE]`) for OpenCode's `openai-compatible`
//! provider.
//!
//! Every request is kept with its JSON body, in order, so that a test can
//! read what a client sent: the whole conversation it resumed. The answer to
//! a turn is fixed by the turn's prompt (the text of the last user message):
//! [`answer`], so a test knows every reply in advance and can look for it
//! in a later request. Anything else is answered 404, and kept too.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};

/// One request a client sent.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    /// The body as JSON (`Null` when it was none, or not JSON).
    pub body: Value,
}

/// The fake API, stopped when dropped.
pub struct FakeModel {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub url: String,
    log: Arc<Mutex<Vec<Request>>>,
    // Dropping the runtime stops the server.
    _rt: tokio::runtime::Runtime,
}

/// What the model answers to `prompt`.
pub fn answer(prompt: &str) -> String {
    format!("answer to: {prompt}")
}

impl FakeModel {
    pub fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log: Arc<Mutex<Vec<Request>>> = Arc::default();
        let app = axum::Router::new().fallback(handle).with_state(log.clone());
        rt.spawn(async move { axum::serve(listener, app).await });
        Self { url, log, _rt: rt }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }

    /// The model requests (Messages or Responses) whose prompt is `prompt`.
    pub fn turns_for(&self, prompt: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| is_turn(&r.path) && last_user_text(&r.body).as_deref() == Some(prompt))
            .collect()
    }
}

fn is_turn(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or_default();
    path == "/v1/messages"
        || path == "/v1/responses"
        || path == "/v1/chat/completions"
        || path.ends_with(":generateContent")
        || path.ends_with(":streamGenerateContent")
}

async fn handle(
    State(log): State<Arc<Mutex<Vec<Request>>>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let path = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.lock().unwrap().push(Request {
        method: method.to_string(),
        path: path.clone(),
        body: body.clone(),
    });
    let bare = uri.path();
    match (method, bare) {
        (Method::POST, "/v1/messages") => messages(&body),
        (Method::POST, "/v1/messages/count_tokens") => json_response(json!({"input_tokens": 10})),
        (Method::POST, "/v1/responses") => responses(&body),
        (Method::POST, p) if p.ends_with(":countTokens") => {
            json_response(json!({"totalTokens": 10}))
        }
        (Method::POST, p) if p.ends_with(":generateContent") => json_response(gemini(&body)),
        (Method::POST, p) if p.ends_with(":streamGenerateContent") => {
            let data = gemini(&body);
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from(format!("data: {data}\r\n\r\n")))
                .unwrap()
        }
        (Method::POST, "/v1/chat/completions") => chat_completions(&body),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())
            .unwrap(),
    }
}

fn json_response(v: Value) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

fn events(events: &[(&str, Value)]) -> Response {
    let text: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from(text))
        .unwrap()
}

/// The messages of a request, each `{"role", "content"}`: Messages' and
/// Responses' as they are; Gemini's `contents` with `model` as `assistant`
/// and `parts` as the content.
fn items(body: &Value) -> Vec<Value> {
    if let Some(contents) = body["contents"].as_array() {
        return contents
            .iter()
            .map(|c| {
                let role = match c["role"].as_str() {
                    Some("model") => "assistant",
                    Some(r) => r,
                    None => "",
                };
                json!({"role": role, "content": c["parts"]})
            })
            .collect();
    }
    body["messages"]
        .as_array()
        .or_else(|| body["input"].as_array())
        .cloned()
        .unwrap_or_default()
}

/// The text of the last user message of a request: its last text part
/// (Claude Code and Gemini CLI put context before the prompt).
pub fn last_user_text(body: &Value) -> Option<String> {
    let items = items(body);
    let last = items.iter().rev().find(|m| m["role"] == "user")?;
    match &last["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .rev()
            .find_map(|p| p["text"].as_str())
            .map(str::to_owned),
        _ => None,
    }
}

/// The (role, text) of every text part of a request's conversation, in
/// order: what the model was shown.
pub fn conversation(body: &Value) -> Vec<(String, String)> {
    let items = items(body);
    let mut out = Vec::new();
    for m in &items {
        let role = m["role"].as_str().unwrap_or_default().to_owned();
        match &m["content"] {
            Value::String(s) => out.push((role, s.clone())),
            Value::Array(parts) => out.extend(
                parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .map(|t| (role.clone(), t.to_owned())),
            ),
            _ => {}
        }
    }
    out
}

/// Anthropic's Messages API: one text block, the answer.
fn messages(body: &Value) -> Response {
    let text = answer(&last_user_text(body).unwrap_or_default());
    let model = body["model"].as_str().unwrap_or("claude");
    let id = format!("msg_{:016x}", fxhash(&text));
    if body["stream"] != true {
        return json_response(json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }));
    }
    events(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            }}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": text}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                   "usage": {"output_tokens": 5}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

/// OpenAI's Responses API, streamed: one assistant message, the answer.
fn responses(body: &Value) -> Response {
    let text = answer(&last_user_text(body).unwrap_or_default());
    let id = format!("resp_{:016x}", fxhash(&text));
    let usage = json!({
        "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    });
    events(&[
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": id}}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": {
                "type": "message", "role": "assistant", "id": format!("msg_{:016x}", fxhash(&id)),
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": id, "usage": usage}}),
        ),
    ])
}

/// Gemini's `GenerateContentResponse`: one candidate, the answer (the
/// same object is each server-sent event of a stream).
fn gemini(body: &Value) -> Value {
    let text = answer(&last_user_text(body).unwrap_or_default());
    json!({
        "candidates": [{
            "content": {"role": "model", "parts": [{"text": text}]},
            "finishReason": "STOP", "index": 0,
        }],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-2.5-flash",
    })
}

/// OpenAI's Chat Completions API: one assistant message, the answer,
/// streamed when asked.
fn chat_completions(body: &Value) -> Response {
    let text = answer(&last_user_text(body).unwrap_or_default());
    let model = body["model"].as_str().unwrap_or("fake");
    let id = format!("chatcmpl_{:016x}", fxhash(&text));
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    if body["stream"] != true {
        return json_response(json!({
            "id": id, "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": usage,
        }));
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut last = chunk(json!({}), json!("stop"));
    last["usage"] = usage;
    let chunks = [
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": text}), Value::Null),
        last,
    ];
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from(out))
        .unwrap()
}

/// A small stable hash, for ids that differ per answer.
fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
