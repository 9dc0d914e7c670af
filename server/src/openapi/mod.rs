//! The OpenAPI document, generated from the handlers' annotations and the
//! shared wire types, served at `/api/v1/openapi.json`.

use axum::Json;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::routes::{accounts, blobs, devices, meta, pairing, records, rotation, wait};

mod format_rules;
use format_rules::FormatRules;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The answers no handler annotation names because a layer or an
/// extractor gives them, on every operation it applies to: the JSON body
/// extractor (400, 408, 413, 415), the streamed upload (400, 408, 413), the
/// token (401), the Host check (421, on all but `/healthz`) and the store
/// (500). Kept here, beside the rule that adds them, so the document lists
/// what the server can answer and no more.
struct LayerAnswers;

fn error_answer(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}

impl Modify for LayerAnswers {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        for (path, item) in api.paths.paths.iter_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                let body_types: Vec<String> = op
                    .request_body
                    .as_ref()
                    .map(|b| b.content.keys().cloned().collect())
                    .unwrap_or_default();
                let mut add = Vec::new();
                if body_types.iter().any(|t| t == "application/json") {
                    add.extend([
                        ("400", "the body does not parse or breaks a format rule"),
                        (
                            "408",
                            "the body stopped arriving (the server's --body-timeout)",
                        ),
                        ("413", "the body is larger than this server takes"),
                        ("415", "the Content-Type is not one this call reads"),
                    ]);
                } else if !body_types.is_empty() {
                    add.extend([
                        ("400", "the upload was cut"),
                        (
                            "408",
                            "the body stopped arriving (the server's --body-timeout)",
                        ),
                        ("413", "the body is larger than this server takes"),
                    ]);
                }
                if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    add.push(("401", "missing, unknown or revoked token"));
                }
                if path != "/healthz" {
                    add.push((
                        "421",
                        "the Host is not the server's public URL (only with --public-url)",
                    ));
                }
                if path != "/healthz" && path != "/api/v1/capabilities" {
                    add.push(("500", "the server failed; the request may be retried"));
                }
                for (status, description) in add {
                    op.responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error_answer(description));
                }
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "evi-server", description = "Stores end-to-end encrypted eVi sync records and blobs. Errors answer `{code, message}`."),
    paths(
        meta::healthz, meta::capabilities, meta::status,
        accounts::register, accounts::login, accounts::change_password,
        accounts::get_key_check, accounts::put_key_check,
        devices::list, devices::revoke,
        records::push, records::pull, records::known, records::damaged, wait::wait,
        blobs::missing, blobs::put, blobs::get, blobs::purge,
        pairing::open, pairing::offer, pairing::join, pairing::wait, pairing::device,
        pairing::reply, pairing::close,
        rotation::begin, rotation::commit,
    ),
    components(schemas(evi_shared::api::ErrorCode, evi_shared::api::PairState)),
    modifiers(&BearerAuth, &LayerAnswers, &FormatRules)
)]
pub struct ApiDoc;

pub async fn serve_doc() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
