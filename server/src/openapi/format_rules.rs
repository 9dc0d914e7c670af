//! The format rules the handlers enforce beyond what the wire types
//! declare: lengths, item counts and patterns, written into the document
//! from the same constants and tables the checks use, so a request the
//! document calls valid is one the server takes (and one it calls invalid,
//! one the server refuses).

use evi_shared::api::base64_pattern;
use evi_shared::limits::{
    DEVICE_NAME_MAX_LEN, KEY_CHECK_MAX_BYTES, MAX_ENTRY_IDS_PER_SEGMENT, MAX_NAMES_PER_CALL,
    PAIR_MESSAGE_MAX_BYTES, PASSWORD_MAX_LEN, PASSWORD_MIN_LEN,
};
use utoipa::Modify;
use utoipa::openapi::schema::{
    ArrayItems, KnownFormat, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{OpenApi, RefOr, Required};

pub struct FormatRules;

/// A string of `min..=max` characters.
fn text(description: &str, min: usize, max: usize, pattern: Option<String>) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .min_length(Some(min))
        .max_length(Some(max))
        .pattern(pattern)
        .into()
}

/// Standard base64 of 1 to `max` bytes (4 characters at least: one byte
/// is `xx==`).
fn bytes(max: usize) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Byte)))
        .description(Some(format!("standard base64 of 1 to {max} bytes")))
        .min_length(Some(4))
        .pattern(Some(base64_pattern(Some(max))))
        .into()
}

/// Standard base64 of exactly 32 bytes (a SHA-256), or null.
fn sha256_or_null() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Byte)))
        .description(Some("standard base64 of a SHA-256 (32 bytes)"))
        .pattern(Some(
            "^(?:[A-Za-z0-9+/]{4}){10}[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=$",
        ))
        .into()
}

fn property<'a>(api: &'a mut OpenApi, schema: &str, field: &str) -> &'a mut RefOr<Schema> {
    let components = api
        .components
        .as_mut()
        .expect("the document has components");
    let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema) else {
        panic!("no object schema {schema}");
    };
    object
        .properties
        .get_mut(field)
        .unwrap_or_else(|| panic!("no property {schema}.{field}"))
}

/// The schema of query parameter `name` of `GET path`.
fn query_parameter<'a>(
    api: &'a mut OpenApi,
    path: &str,
    name: &str,
) -> &'a mut Option<RefOr<Schema>> {
    let get = api
        .paths
        .paths
        .get_mut(path)
        .and_then(|item| item.get.as_mut())
        .unwrap_or_else(|| panic!("no GET {path}"));
    let parameter = get
        .parameters
        .iter_mut()
        .flatten()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no parameter {name} of GET {path}"));
    &mut parameter.schema
}

fn items(api: &mut OpenApi, schema: &str, field: &str, min: Option<usize>, max: usize) {
    let RefOr::T(Schema::Array(array)) = property(api, schema, field) else {
        panic!("{schema}.{field} is not an array");
    };
    array.min_items = min;
    array.max_items = Some(max);
}

impl Modify for FormatRules {
    fn modify(&self, api: &mut OpenApi) {
        let device = || {
            text(
                "Device name shown in the device list: printable text with something \
                 visible, no control or text-direction characters.",
                1,
                DEVICE_NAME_MAX_LEN,
                Some(crate::device_name::pattern()),
            )
        };
        *property(api, "RegisterRequest", "device") = device();
        *property(api, "LoginRequest", "device") = device();
        *property(api, "PairDeviceRequest", "device") = device();
        let device_id = |nullable: bool| {
            let mut id = ObjectBuilder::new()
                .description(Some(
                    "A device id, as the device list gives it: 1 to 128 characters, no \
                     control characters.",
                ))
                .min_length(Some(1))
                .max_length(Some(crate::routes::DEVICE_ID_MAX_LEN))
                .pattern(Some(crate::routes::DEVICE_ID_PATTERN));
            id = if nullable {
                id.schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            } else {
                id.schema_type(Type::String)
            };
            RefOr::T(Schema::Object(id.build()))
        };
        *property(api, "PairDeviceRequest", "replaces") = device_id(true);
        let RefOr::T(Schema::Array(revoke)) = property(api, "RotationCommitRequest", "revoke")
        else {
            panic!("RotationCommitRequest.revoke is not an array");
        };
        revoke.items = ArrayItems::RefOrSchema(Box::new(device_id(false)));
        *query_parameter(api, "/api/v1/devices", "after") = Some(device_id(false));
        let password = |what: &str| text(what, PASSWORD_MIN_LEN, PASSWORD_MAX_LEN, None);
        *property(api, "RegisterRequest", "password") = password("The account password.");
        *property(api, "PasswordChangeRequest", "new_password") = password("The new password.");
        *property(api, "KeyCheckRequest", "key_check") = bytes(KEY_CHECK_MAX_BYTES);
        *property(api, "KeyCheckRequest", "key_proof_hash") = sha256_or_null();
        *property(api, "RotationBeginRequest", "key_proof_hash") = sha256_or_null();
        // The messages a pairing slot relays, opaque to the server.
        *property(api, "PairOpenRequest", "offer") = bytes(PAIR_MESSAGE_MAX_BYTES);
        *property(api, "PairJoinRequest", "hello") = bytes(PAIR_MESSAGE_MAX_BYTES);
        *property(api, "PairReplyRequest", "reply") = bytes(PAIR_MESSAGE_MAX_BYTES);
        items(
            api,
            "Segment",
            "entry_ids",
            Some(1),
            MAX_ENTRY_IDS_PER_SEGMENT,
        );
        items(api, "EntryIds", "entry_ids", None, MAX_NAMES_PER_CALL);
        items(api, "BlobNames", "names", None, MAX_NAMES_PER_CALL);
        raw_bytes(api);
    }
}

/// Blob bodies are raw bytes (`string`/`binary`, not an array of
/// numbers), and an upload may be empty: a 0-byte blob is stored as one.
fn raw_bytes(api: &mut OpenApi) {
    let binary = || -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .into()
    };
    for item in api.paths.paths.values_mut() {
        let ops = [&mut item.get, &mut item.put].into_iter().flatten();
        for op in ops {
            if let Some(body) = op.request_body.as_mut()
                && let Some(content) = body.content.get_mut(OCTET_STREAM)
            {
                content.schema = Some(binary());
                body.required = Some(Required::False);
            }
            for response in op.responses.responses.values_mut() {
                if let RefOr::T(response) = response
                    && let Some(content) = response.content.get_mut(OCTET_STREAM)
                {
                    content.schema = Some(binary());
                }
            }
        }
    }
}

const OCTET_STREAM: &str = "application/octet-stream";
