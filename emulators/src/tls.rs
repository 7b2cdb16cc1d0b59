//! TLS for the emulators: a test CA made at start, a server certificate it signs for the
//! emulator's names, and a front that terminates TLS and relays the plain bytes to the
//! emulator's HTTP server on loopback.
//!
//! The CA's certificate may be written to a file for clients to trust (a certificate is
//! public); its private key exists only in this process's memory and dies with it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};

use crate::error::EmulateError;

/// A test CA and the server configuration of a certificate it signed.
pub struct TestCa {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A fresh CA and a server certificate for `domain`, every name under it
    /// (`*.<domain>`), its control-plane host `api.<domain>`, `localhost` and 127.0.0.1
    /// (for clients given one URL for everything, such as E2B's `E2B_SANDBOX_URL`).
    pub fn generate(domain: &str) -> Result<Self, EmulateError> {
        let tls = |e: rcgen::Error| EmulateError::Tls(e.to_string());
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(tls)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "sandbox-matrix emulator test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(tls)?;
        let ca_pem = ca.self_signed(&ca_key).map_err(tls)?.pem();
        let issuer = Issuer::new(ca, ca_key);

        let names = vec![
            format!("*.{domain}"),
            format!("api.{domain}"),
            domain.to_owned(),
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        let mut server = CertificateParams::new(names).map_err(tls)?;
        server.distinguished_name.push(
            DnType::CommonName,
            format!("sandbox-matrix emulator for {domain}"),
        );
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(tls)?;
        let cert = server.signed_by(&key, &issuer).map_err(tls)?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| EmulateError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .map_err(|e| EmulateError::Tls(e.to_string()))?;
        // The server behind the front speaks HTTP/1.1 only; saying so keeps a client that
        // prefers h2 when offered (the E2B SDK's pyqwest) on HTTP/1.1.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            ca_pem,
            server: Arc::new(config),
        })
    }

    /// The CA certificate, PEM: what a client adds to its trusted roots.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Writes the CA certificate (never its key) to `path`.
    pub fn write_ca(&self, path: &Path) -> Result<(), EmulateError> {
        std::fs::write(path, &self.ca_pem).map_err(|e| EmulateError::Io {
            what: format!("write the CA certificate to {}", path.display()),
            source: e,
        })
    }

    /// The server side of TLS, for [`terminate`].
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.server.clone()
    }
}

/// Accepts TLS connections on `listener` and relays each one's plain bytes to `upstream`
/// (an HTTP server on loopback, WebSocket upgrades included), until the task is aborted.
pub fn terminate(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    upstream: SocketAddr,
) -> tokio::task::JoinHandle<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                // A client that does not trust the CA ends the handshake: nothing to relay.
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = plain.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    })
}
