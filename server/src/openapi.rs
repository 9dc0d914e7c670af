//! The OpenAPI document, generated from the handlers' annotations and the
//! shared wire types, served at `/api/v1/openapi.json`.

use axum::Json;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::routes::{accounts, blobs, devices, meta, records};

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

#[derive(OpenApi)]
#[openapi(
    info(title = "evi-server", description = "Stores end-to-end encrypted eVi sync records and blobs. Errors answer `{code, message}`."),
    paths(
        meta::healthz, meta::capabilities, meta::status,
        accounts::register, accounts::login, accounts::change_password,
        accounts::get_key_check, accounts::put_key_check,
        devices::list, devices::revoke,
        records::push, records::pull, records::known,
        blobs::missing, blobs::put, blobs::get, blobs::purge,
    ),
    components(schemas(evi_shared::api::ErrorCode)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

pub async fn serve_doc() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
