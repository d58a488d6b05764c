//! Certificates and keys for a throw-away control plane, shaped like envtest's TinyCA.

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

fn ca(common_name: &str) -> Result<CertifiedIssuer<'static, KeyPair>> {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name, Some("external-secrets-testenv"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, key()?).context("self-signing a CA")
}

impl Pki {
    pub(crate) fn generate() -> Result<Self> {
        let serving_ca = ca("testenv-serving-ca")?;
        let serving_key = key()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name("localhost", None);
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into()?),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = params
            .signed_by(&serving_key, &serving_ca)
            .context("signing the serving certificate")?;

        let client_ca = ca("testenv-client-ca")?;
        let admin_key = key()?;
        let mut params = CertificateParams::default();
        // The apiserver maps CN to the user name and O to groups; system:masters bypasses RBAC.
        params.distinguished_name = name("admin", Some("system:masters"));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = params
            .signed_by(&admin_key, &client_ca)
            .context("signing the admin client certificate")?;

        let sa_key = key()?;

        Ok(Self {
            serving_ca_pem: serving_ca.pem(),
            serving_ca_der: serving_ca.der().to_vec(),
            serving_cert_pem: serving_cert.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            client_ca_pem: client_ca.pem(),
            admin_cert_pem: admin_cert.pem(),
            admin_key_pem: admin_key.serialize_pem(),
            sa_public_key_pem: sa_key.public_key_pem(),
            sa_key_pem: sa_key.serialize_pem(),
        })
    }
}
