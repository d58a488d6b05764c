//! Certificates and keys for throw-away servers, shaped like envtest's TinyCA.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};

pub(crate) struct Pki {
    pub serving_ca_pem: String,
    pub serving_ca_der: Vec<u8>,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub client_ca_pem: String,
    pub client_ca: CertificateAuthority,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    pub sa_key_pem: String,
    pub sa_public_key_pem: String,
}

fn key() -> Result<KeyPair> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).context("generating an ECDSA P-256 key")
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

/// A certificate and its private key, both PEM (the key PKCS#8).
#[derive(Clone)]
pub struct IssuedCertificate {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A self-signed certificate authority (ECDSA P-256) that issues server and client
/// certificates for tests.
pub struct CertificateAuthority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl CertificateAuthority {
    pub fn new(common_name: &str) -> Result<Self> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, Some("external-secrets-testenv"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, key()?).context("self-signing a CA")?;
        Ok(Self { issuer })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// A serving certificate for `localhost` and `127.0.0.1`.
    pub fn issue_server(&self) -> Result<IssuedCertificate> {
        self.issue_server_for(&[], &[])
    }

    /// A serving certificate for `localhost`, `127.0.0.1` and `names` and `ips` besides.
    pub fn issue_server_for(&self, names: &[&str], ips: &[IpAddr]) -> Result<IssuedCertificate> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name("localhost", None);
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into()?),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ];
        for name in names {
            params
                .subject_alt_names
                .push(SanType::DnsName((*name).try_into()?));
        }
        params
            .subject_alt_names
            .extend(ips.iter().copied().map(SanType::IpAddress));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params, "a serving certificate")
    }

    /// A client certificate with subject `CN=<common_name>[, O=<organization>]`.
    pub fn issue_client(
        &self,
        common_name: &str,
        organization: Option<&str>,
    ) -> Result<IssuedCertificate> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, organization);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params, "a client certificate")
    }

    fn issue(&self, params: CertificateParams, what: &str) -> Result<IssuedCertificate> {
        let key = key()?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .with_context(|| format!("signing {what}"))?;
        Ok(IssuedCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl Pki {
    /// `serving_names` and `serving_ips` go into the API server's certificate besides
    /// `localhost` and `127.0.0.1` (a node's Pods reach it at other names and addresses).
    pub(crate) fn generate(serving_names: &[&str], serving_ips: &[IpAddr]) -> Result<Self> {
        let serving_ca = CertificateAuthority::new("testenv-serving-ca")?;
        let serving = serving_ca.issue_server_for(serving_names, serving_ips)?;
        let client_ca = CertificateAuthority::new("testenv-client-ca")?;
        // The apiserver maps CN to the user name and O to groups; system:masters bypasses RBAC.
        let admin = client_ca.issue_client("admin", Some("system:masters"))?;
        let sa_key = key()?;

        Ok(Self {
            serving_ca_pem: serving_ca.cert_pem(),
            serving_ca_der: serving_ca.cert_der(),
            serving_cert_pem: serving.cert_pem,
            serving_key_pem: serving.key_pem,
            client_ca_pem: client_ca.cert_pem(),
            admin_cert_pem: admin.cert_pem,
            admin_key_pem: admin.key_pem,
            sa_public_key_pem: sa_key.public_key_pem(),
            sa_key_pem: sa_key.serialize_pem(),
            client_ca,
        })
    }
}
