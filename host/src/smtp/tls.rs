//! The TLS side of the SMTP listeners: a rustls server configuration from a PEM certificate
//! chain and key (read once at start), for `STARTTLS` and for implicit TLS.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;

use crate::config::SettingsError;

/// An acceptor serving `cert` (a PEM chain, leaf first) with `key` (PEM, PKCS#8, PKCS#1 or
/// SEC1); errors name `table`'s setting that holds the file that failed.
pub fn acceptor(table: &str, cert: &Path, key: &Path) -> Result<TlsAcceptor, SettingsError> {
    let unusable = |name: &str, path: &Path, message: String| SettingsError::Unusable {
        setting: format!("{table}.{name}"),
        message: format!("`{}`: {message}", path.display()),
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| unusable("tls_cert_file", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(unusable(
            "tls_cert_file",
            cert,
            "holds no PEM certificate".into(),
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| unusable("tls_key_file", key, e.to_string()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| unusable("tls_cert_file", cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| unusable("tls_key_file", key, e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
