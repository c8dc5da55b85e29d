//! quinn + h3 + h3-quinn on rustls (ring): `GET /1k` answered with 1,024 bytes, one
//! current_thread tokio runtime. quinn owns the UDP socket here (quinn-udp: GSO, GRO,
//! ECN where the kernel has them); a real server would bring its own `AsyncUdpSocket`.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use quic_stacks::{args, body_for};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn main() {
    let (port, cert, key, _) = args();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .expect("cert")
        .collect::<Result<_, _>>()
        .expect("cert pem");
    let key = PrivateKeyDer::from_pem_file(&key).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("cert/key");
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).expect("quic tls");
    let server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let endpoint = quinn::Endpoint::server(server, addr).expect("bind");
        eprintln!("quinn-h3 listening on {addr}");
        while let Some(incoming) = endpoint.accept().await {
            // Boxed: tokio moves a task's future by value on spawn and on every state
            // change; an unboxed h3 future made those copies a tenth of a request's cost.
            tokio::spawn(Box::pin(async move {
                if let Ok(conn) = incoming.await {
                    let _ = serve(conn).await;
                }
            }));
        }
    });
}

async fn serve(conn: quinn::Connection) -> Result<(), Box<dyn std::error::Error>> {
    let mut h3: h3::server::Connection<_, Bytes> =
        h3::server::Connection::new(h3_quinn::Connection::new(conn)).await?;
    while let Some(resolver) = h3.accept().await? {
        tokio::spawn(Box::pin(async move {
            let Ok((req, mut stream)) = resolver.resolve_request().await else {
                return;
            };
            let body = body_for(req.uri().path());
            let status = if body.is_some() { 200 } else { 404 };
            let len = body.map_or(0, |b| b.len());
            let resp = http::Response::builder()
                .status(status)
                .header("content-length", len)
                .body(())
                .expect("response");
            if stream.send_response(resp).await.is_err() {
                return;
            }
            if let Some(b) = body {
                if stream.send_data(Bytes::from_static(b)).await.is_err() {
                    return;
                }
            }
            let _ = stream.finish().await;
        }));
    }
    Ok(())
}
