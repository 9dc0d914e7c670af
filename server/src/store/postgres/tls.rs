//! TLS to Postgres with rustls, as libpq's `sslmode` means it.
//!
//! `disable`: plain. `prefer` (the default) and `require`: encrypted when
//! the server offers it (`require`: or no connection), the certificate not
//! checked, as libpq does (its own words: "I trust that the network will
//! make sure I always connect to the server I want"); the usual case of a
//! database on a private network with a self-signed certificate.
//! `verify-full` (and `verify-ca`, taken as the stricter `verify-full`):
//! encrypted, and the certificate must chain to a web root and name the
//! host.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::OpenError;

/// The URL with a `verify-*` sslmode turned into `require` (the most
/// tokio-postgres knows), and whether certificates are to be verified.
pub fn split_verify(url: &str) -> (String, bool) {
    let mut verify = false;
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), false);
    };
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some(("sslmode", "verify-full" | "verify-ca")) => {
                verify = true;
                "sslmode=require".to_owned()
            }
            _ => kv.to_owned(),
        })
        .collect();
    (format!("{base}?{}", query.join("&")), verify)
}

pub fn connector(verify: bool) -> Result<MakeRustlsConnect, OpenError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| OpenError::Tls(e.to_string()))?;
    let config = if verify {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(
                provider.signature_verification_algorithms,
            )))
            .with_no_client_auth()
    };
    Ok(MakeRustlsConnect::new(config))
}

/// Accepts any certificate, still checking that the server holds its key
/// (the handshake signatures), so the session is encrypted to whoever
/// answered: `sslmode=require`'s promise, no more.
#[derive(Debug)]
struct EncryptOnly(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
