//! `Moto` against the real moto server from its venv: fixtures written with the boto3 helpers
//! read back with them, and STS calls counted through moto's recorder.

use anyhow::{Result, ensure};
use external_secrets_testenv::{Moto, moto};

/// Quotes, a backslash and a newline: values reach Python as data, not code.
const AWKWARD: &str = "it's \"quoted\" \\ and\nmultiline ''' \"\"\"";

#[tokio::test]
async fn secrets_round_trip_on_the_shared_server() -> Result<()> {
    let moto = moto().await?;
    ensure!(
        std::ptr::eq(moto, Moto::shared()?),
        "one shared server per process"
    );
    assert!(moto.endpoint().starts_with("http://127.0.0.1:"));

    let created = moto.create_secret("round-trip/string", AWKWARD)?;
    assert!(created.arn.contains(":secret:round-trip/string"));
    assert_eq!(
        moto.get_secret_string("round-trip/string")?.as_deref(),
        Some(AWKWARD)
    );
    let second = moto.put_secret_value("round-trip/string", "second")?;
    assert_ne!(second, created.version_id);
    assert_eq!(
        moto.get_secret_string("round-trip/string")?.as_deref(),
        Some("second")
    );
    moto.tag_secret("round-trip/string", &[("team", "a'b"), ("env", "test")])?;
    let tags = moto.secret_tags("round-trip/string")?;
    assert_eq!(tags.get("team").map(String::as_str), Some("a'b"));
    assert_eq!(tags.get("env").map(String::as_str), Some("test"));

    let bytes = [0u8, 159, 146, 150, b'\'', b'"'];
    moto.create_secret_binary("round-trip/binary", &bytes)?;
    assert_eq!(
        moto.get_secret_binary("round-trip/binary")?.as_deref(),
        Some(&bytes[..])
    );
    assert!(moto.get_secret_string("round-trip/binary").is_err());

    assert_eq!(moto.get_secret_string("round-trip/missing")?, None);
    Ok(())
}

#[tokio::test]
async fn parameters_round_trip_on_the_shared_server() -> Result<()> {
    let moto = moto().await?;
    let version = moto.put_parameter(
        "/round-trip/secure",
        AWKWARD,
        "SecureString",
        &[("owner", "x\"y")],
    )?;
    assert_eq!(version, 1);
    assert_eq!(
        moto.get_parameter("/round-trip/secure")?.as_deref(),
        Some(AWKWARD)
    );
    assert_eq!(
        moto.parameter_tags("/round-trip/secure")?
            .get("owner")
            .map(String::as_str),
        Some("x\"y")
    );
    // Overwriting while tagging: AWS refuses both in one PutParameter.
    let version = moto.put_parameter(
        "/round-trip/secure",
        "second",
        "SecureString",
        &[("more", "1")],
    )?;
    assert_eq!(version, 2);
    assert_eq!(
        moto.get_parameter("/round-trip/secure")?.as_deref(),
        Some("second")
    );
    assert_eq!(moto.parameter_tags("/round-trip/secure")?.len(), 2);
    assert_eq!(moto.get_parameter("/round-trip/missing")?, None);
    Ok(())
}

/// What a test of a provider's STS use relies on: every AssumeRole* call moto answered is in
/// the recording, named as `("sts", <Action>)`.
#[test]
fn counts_sts_calls_on_a_server_of_its_own() -> Result<()> {
    let moto = Moto::start_own()?;
    let assume = "\
r = boto3.client('sts').assume_role(RoleArn='arn:aws:iam::123456789012:role/reader', RoleSessionName='ts')
print(r['AssumedRoleUser']['Arn'])
";
    // Before recording: not counted.
    moto.boto3(assume)?;
    moto.start_recording()?;
    let arn = moto.boto3(assume)?;
    assert_eq!(
        arn.trim(),
        "arn:aws:sts::123456789012:assumed-role/reader/ts"
    );
    moto.boto3(assume)?;
    moto.boto3(
        "\
from botocore import UNSIGNED
from botocore.config import Config
sts = boto3.client('sts', config=Config(signature_version=UNSIGNED))
sts.assume_role_with_web_identity(
    RoleArn='arn:aws:iam::123456789012:role/web', RoleSessionName='web', WebIdentityToken='a.b.c')
",
    )?;
    moto.create_secret("recorded", "v")?;
    let recorded = moto.recorded_actions()?;
    eprintln!("recorded: {recorded:?}");
    assert_eq!(moto.count_recorded("sts", "AssumeRole")?, 2);
    assert_eq!(moto.count_recorded("sts", "AssumeRoleWithWebIdentity")?, 1);
    assert_eq!(moto.count_recorded("secretsmanager", "CreateSecret")?, 1);

    moto.stop_recording()?;
    moto.boto3(assume)?;
    assert_eq!(moto.count_recorded("sts", "AssumeRole")?, 2);
    moto.start_recording()?;
    assert_eq!(moto.recorded_actions()?, vec![]);
    Ok(())
}
