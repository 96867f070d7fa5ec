//! A private certificate authority made with `openssl` for a test: its
//! certificate, and the server and client certificates it signs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl").args(args).current_dir(dir).stderr(Stdio::null()).stdout(Stdio::null()).status().unwrap();
    assert!(status.success(), "openssl {args:?}");
}

/// A private certificate authority in a temp dir, removed on drop.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    /// A fresh authority: `ca.pem`, `ca.key`.
    pub fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("dokebi-lock-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=dokebi test CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
        );
        // What `openssl ca` (for set validity dates) needs.
        std::fs::write(dir.join("index.txt"), "").unwrap();
        std::fs::write(dir.join("serial"), "01\n").unwrap();
        std::fs::write(
            dir.join("ca.cnf"),
            "[ca]\ndefault_ca = test\n[test]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = any\nunique_subject = no\n[any]\ncommonName = supplied\n",
        )
        .unwrap();
        Pki { dir }
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_owned()
    }

    pub fn text(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap()
    }

    /// `<name>.pem` and `<name>.key`: a self-signed certificate for
    /// localhost and 127.0.0.1 whose key is RSA of 1024 bits, which rustls
    /// cannot check a signature of; and `openssl.cnf`, the OpenSSL
    /// configuration (security level 0) under which a server loads it.
    pub fn weak_key(&self, name: &str) {
        let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
        openssl(
            &self.dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:1024",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-keyout",
                &key,
                "-out",
                &pem,
            ],
        );
        std::fs::write(
            self.dir.join("openssl.cnf"),
            "openssl_conf = d\n[d]\nssl_conf = s\n[s]\nsystem_default = t\n[t]\nCipherString = DEFAULT@SECLEVEL=0\n",
        )
        .unwrap();
    }

    /// `<name>.pem` and `<name>.key`: a certificate the authority signed
    /// for the subject alternative names `san` (e.g. `DNS:localhost`),
    /// valid from `validity` (`None`: from now for a day; else `openssl ca`
    /// start and end dates, `YYYYMMDDHHMMSSZ`). `client` makes it a client
    /// certificate.
    pub fn issue(&self, name: &str, san: &str, validity: Option<(&str, &str)>, client: bool) {
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let pem = format!("{name}.pem");
        let ext = format!("{name}.ext");
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        );
        let usage = if client { "clientAuth" } else { "serverAuth" };
        std::fs::write(self.dir.join(&ext), format!("subjectAltName={san}\nextendedKeyUsage={usage}\n")).unwrap();
        match validity {
            None => openssl(
                &self.dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "1",
                    "-out",
                    &pem,
                    "-extfile",
                    &ext,
                ],
            ),
            Some((start, end)) => openssl(
                &self.dir,
                &[
                    "ca",
                    "-batch",
                    "-notext",
                    "-config",
                    "ca.cnf",
                    "-cert",
                    "ca.pem",
                    "-keyfile",
                    "ca.key",
                    "-in",
                    &csr,
                    "-out",
                    &pem,
                    "-startdate",
                    start,
                    "-enddate",
                    end,
                    "-extfile",
                    &ext,
                ],
            ),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
