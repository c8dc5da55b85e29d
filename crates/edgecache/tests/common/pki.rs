//! A test PKI: a CA made in the test and leaves signed by it, written as PEM files.

use std::path::PathBuf;

pub struct Pki {
    pub ca: rcgen::Certificate,
    pub ca_key: rcgen::KeyPair,
    pub dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "edgecache test CA");
        let ca = params.self_signed(&ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki { ca, ca_key, dir }
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A leaf for `names` signed by the CA, written as `<tag>.pem`/`<tag>.key`; its DER.
    pub fn leaf(&self, tag: &str, names: &[&str]) -> (PathBuf, PathBuf, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (c, k) = self.write(tag, &cert.pem(), &key.serialize_pem());
        (c, k, cert.der().to_vec())
    }

    pub fn write(&self, tag: &str, cert: &str, key: &str) -> (PathBuf, PathBuf) {
        let c = self.dir.path().join(format!("{tag}.pem"));
        let k = self.dir.path().join(format!("{tag}.key"));
        // Written aside and renamed, as an operator's deploy would: a reload never
        // reads half a file.
        std::fs::write(c.with_extension("tmp"), cert).unwrap();
        std::fs::rename(c.with_extension("tmp"), &c).unwrap();
        std::fs::write(k.with_extension("tmp"), key).unwrap();
        std::fs::rename(k.with_extension("tmp"), &k).unwrap();
        (c, k)
    }
}
