//! OCI images of the operator, written as OCI image layouts (a folder and the same as a tar
//! archive) without a container engine, so that they can be built where no Docker daemon runs.
//!
//! Every image is the same two layers, from scratch: the shared libraries the binary links (as
//! `ldd` resolves them), CA certificates, `/etc/passwd` and `/etc/group` naming the non-root user
//! 65532 and an empty `/tmp`; then the binary. Only the config differs (entrypoint, title), so
//! a node that pulled the operator's image pulls nothing but a manifest and a config for a
//! provider server's.
//!
//! Reproducible: the same binary, libraries, certificates and source revision give the same
//! digests. Tar entries are sorted, owned by 0:0 and dated 0; gzip carries no time nor name; the
//! config's `created` is the commit's time, not the build's.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const UID: u32 = 65532;
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// Where the binary lives in every image.
pub const BINARY: &str = "/external-secrets";
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The provider kinds that can be served out of process (compiled into the binary and offered
/// by the chart's `providers.<key>.outOfProcess`), one image each.
pub const PROVIDER_SERVERS: [&str; 5] = ["Fake", "Vault", "Gitlab", "Kubernetes", "AWS"];

/// What an image is built from.
pub struct Inputs {
    pub binary: PathBuf,
    pub ca_certificates: PathBuf,
    /// Registry and owner the images are named under, e.g. `ghcr.io/external-secrets-rs`.
    pub registry: String,
    pub source: Source,
    /// Provider kinds (`Vault`) that get an image of their own serving them out of process.
    pub provider_servers: Vec<String>,
}

/// Where the binary came from, for the images' labels.
#[derive(Clone, Debug)]
pub struct Source {
    /// The image tag: the chart's appVersion.
    pub version: String,
    /// The commit, with `-dirty` when the work tree had changes.
    pub revision: String,
    /// The commit's time (RFC 3339), the images' `created`.
    pub created: String,
    pub url: String,
}

impl Source {
    /// Reads the revision from git and the version from the chart's `appVersion` in `repo`.
    pub fn from_repository(repo: &Path) -> Result<Self> {
        let git = |args: &[&str]| -> Result<String> {
            let out = Command::new("git")
                .current_dir(repo)
                .args(args)
                .output()
                .context("running git")?;
            ensure!(
                out.status.success(),
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(String::from_utf8(out.stdout)?.trim().to_owned())
        };
        let head = git(&["rev-parse", "HEAD"])?;
        let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
        let chart = repo.join("charts/external-secrets/Chart.yaml");
        let chart_text =
            fs::read_to_string(&chart).with_context(|| format!("reading {}", chart.display()))?;
        let version = chart_text
            .lines()
            .find_map(|l| l.strip_prefix("appVersion:"))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .with_context(|| format!("no appVersion in {}", chart.display()))?;
        Ok(Self {
            version,
            revision: if dirty { format!("{head}-dirty") } else { head },
            created: git(&["log", "-1", "--format=%cI"])?,
            url: "https://github.com/external-secrets-rs/external-secrets-rs".into(),
        })
    }
}

/// One image: its name and what it runs.
pub struct ImageSpec {
    pub name: String,
    pub title: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
}

/// The operator's image and one per provider server.
pub fn specs(provider_servers: &[String]) -> Vec<ImageSpec> {
    let mut specs = vec![ImageSpec {
        name: "external-secrets".into(),
        title: "external-secrets: the operator (controller, conversion webhook, every provider compiled in)".into(),
        entrypoint: vec![BINARY.into()],
        cmd: vec!["controller".into()],
    }];
    specs.extend(provider_servers.iter().map(|kind| ImageSpec {
        name: format!("external-secrets-provider-{}", kind.to_lowercase()),
        title: format!("external-secrets: the {kind} provider served out of process"),
        entrypoint: vec![
            BINARY.into(),
            "provider".into(),
            "serve".into(),
            format!("--kind={kind}"),
        ],
        cmd: vec![],
    }));
    specs
}

/// An image written to `out`.
#[derive(Clone, Debug)]
pub struct Built {
    pub name: String,
    /// `registry/name:version`
    pub reference: String,
    /// The manifest's digest, what a registry names the image by.
    pub digest: String,
    /// The OCI image layout folder.
    pub layout: PathBuf,
    /// The same layout as a tar archive (`kind load image-archive`, `ctr images import`,
    /// `skopeo copy oci-archive:...`).
    pub archive: PathBuf,
    /// Compressed bytes: the layers, the config and the manifest.
    pub size: u64,
}

/// Writes every image to `out/<name>/` and `out/<name>.tar`, replacing what was there.
pub fn build(inputs: &Inputs, out: &Path) -> Result<Vec<Built>> {
    let layers = [base_layer(inputs)?, binary_layer(&inputs.binary)?];
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    specs(&inputs.provider_servers)
        .iter()
        .map(|spec| write_image(inputs, spec, &layers, out))
        .collect()
}

/// A layer: its uncompressed digest (the config's diff_id) and its gzip bytes.
struct Layer {
    diff_id: String,
    gzip: Vec<u8>,
    what: &'static str,
}

impl Layer {
    fn new(entries: BTreeMap<String, Entry>, what: &'static str) -> Result<Self> {
        let tar = tar_bytes(&entries)?;
        Ok(Self {
            diff_id: digest(&tar),
            gzip: gzip(&tar)?,
            what,
        })
    }
}

enum Entry {
    Dir(u32),
    File { mode: u32, bytes: Vec<u8> },
}

fn base_layer(inputs: &Inputs) -> Result<Layer> {
    let mut entries = BTreeMap::new();
    let mut file = |path: &str, mode: u32, bytes: Vec<u8>| {
        add_parents(&mut entries, path);
        entries.insert(
            path.trim_start_matches('/').to_owned(),
            Entry::File { mode, bytes },
        );
    };
    for lib in shared_libraries(&inputs.binary)? {
        let bytes = fs::read(&lib).with_context(|| format!("reading {}", lib.display()))?;
        file(&lib.to_string_lossy(), 0o755, bytes);
    }
    let certs = fs::read(&inputs.ca_certificates)
        .with_context(|| format!("reading {}", inputs.ca_certificates.display()))?;
    file(CA_BUNDLE, 0o644, certs);
    file(
        "/etc/passwd",
        0o644,
        format!(
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{UID}:{UID}:nonroot:/:/sbin/nologin\n"
        )
        .into_bytes(),
    );
    file(
        "/etc/group",
        0o644,
        format!("root:x:0:\nnonroot:x:{UID}:\n").into_bytes(),
    );
    entries.insert("tmp".into(), Entry::Dir(0o1777));
    Layer::new(entries, "shared libraries, CA certificates, user 65532")
}

fn binary_layer(binary: &Path) -> Result<Layer> {
    let bytes = fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let entries = BTreeMap::from([(
        BINARY.trim_start_matches('/').to_owned(),
        Entry::File { mode: 0o755, bytes },
    )]);
    Layer::new(entries, "the external-secrets binary")
}

fn add_parents(entries: &mut BTreeMap<String, Entry>, path: &str) {
    let mut parent = Path::new(path.trim_start_matches('/')).parent();
    while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
        entries
            .entry(dir.to_string_lossy().into_owned())
            .or_insert(Entry::Dir(0o755));
        parent = dir.parent();
    }
}

/// The shared objects `ldd` says the binary loads, at the paths the loader looks them up by
/// (the dynamic loader included); none for a static binary.
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd (Debian's libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        if text.contains("not a dynamic executable")
            || String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable")
        {
            return Ok(vec![]);
        }
        bail!(
            "ldd {}: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_ldd(&text)
}

fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.contains("=> not found") {
            bail!("a shared library is missing: {line}");
        }
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, or the loader itself as
        // `/lib64/ld-linux-x86-64.so.2 (0x...)`; the vDSO has no file.
        let path = match line.split_once("=>") {
            Some((_, resolved)) => resolved.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(path));
        }
    }
    libs.sort();
    libs.dedup();
    Ok(libs)
}

fn tar_bytes(entries: &BTreeMap<String, Entry>) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, entry) in entries {
        let mut header = tar::Header::new_ustar();
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        match entry {
            Entry::Dir(mode) => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(*mode);
                header.set_size(0);
                builder.append_data(&mut header, format!("{path}/"), std::io::empty())?;
            }
            Entry::File { mode, bytes } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(*mode);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, path, bytes.as_slice())?;
            }
        }
    }
    Ok(builder.into_inner()?)
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    // No file name and time 0 in the header: the same bytes in, the same bytes out.
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn labels(inputs: &Inputs, spec: &ImageSpec) -> Value {
    let s = &inputs.source;
    json!({
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.description": spec.title,
        "org.opencontainers.image.version": s.version,
        "org.opencontainers.image.revision": s.revision,
        "org.opencontainers.image.source": s.url,
        "org.opencontainers.image.created": s.created,
        "org.opencontainers.image.licenses": "Apache-2.0",
    })
}

fn write_image(inputs: &Inputs, spec: &ImageSpec, layers: &[Layer], out: &Path) -> Result<Built> {
    let layout = out.join(&spec.name);
    if layout.exists() {
        fs::remove_dir_all(&layout).with_context(|| format!("removing {}", layout.display()))?;
    }
    let blobs = layout.join("blobs/sha256");
    fs::create_dir_all(&blobs)?;
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut blob = |bytes: Vec<u8>| -> (String, u64) {
        let d = digest(&bytes);
        let size = bytes.len() as u64;
        files.insert(format!("blobs/sha256/{}", &d["sha256:".len()..]), bytes);
        (d, size)
    };
    let labels = labels(inputs, spec);
    let config = json!({
        "created": inputs.source.created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": format!("{UID}:{UID}"),
            "Entrypoint": spec.entrypoint,
            "Cmd": spec.cmd,
            "Env": [
                "PATH=/",
                format!("SSL_CERT_FILE={CA_BUNDLE}"),
            ],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>(),
        },
        "history": layers.iter().map(|l| json!({
            "created": inputs.source.created,
            "created_by": format!("hack/build-images.sh: {}", l.what),
        })).collect::<Vec<_>>(),
    });
    let mut size = 0;
    let mut layer_descriptors = Vec::new();
    for layer in layers {
        let (d, n) = blob(layer.gzip.clone());
        size += n;
        layer_descriptors.push(json!({"mediaType": LAYER, "digest": d, "size": n}));
    }
    let (config_digest, config_size) = blob(serde_json::to_vec(&config)?);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": config_size},
        "layers": layer_descriptors,
        "annotations": labels,
    });
    let (manifest_digest, manifest_size) = blob(serde_json::to_vec(&manifest)?);
    size += config_size + manifest_size;
    let reference = format!(
        "{}/{}:{}",
        inputs.registry, spec.name, inputs.source.version
    );
    let index = json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [{
            "mediaType": MANIFEST,
            "digest": manifest_digest,
            "size": manifest_size,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                // containerd (`ctr images import`, `kind load image-archive`) names the
                // image by the first; OCI tools by the tag in the second.
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": inputs.source.version,
            },
        }],
    });
    files.insert("index.json".into(), serde_json::to_vec(&index)?);
    files.insert(
        "oci-layout".into(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    );

    let mut archive = BTreeMap::new();
    for (path, bytes) in files {
        let target = layout.join(&path);
        fs::write(&target, &bytes).with_context(|| format!("writing {}", target.display()))?;
        add_parents(&mut archive, &path);
        archive.insert(path, Entry::File { mode: 0o644, bytes });
    }
    let archive_path = out.join(format!("{}.tar", spec.name));
    fs::write(&archive_path, tar_bytes(&archive)?)
        .with_context(|| format!("writing {}", archive_path.display()))?;
    Ok(Built {
        name: spec.name.clone(),
        reference,
        digest: manifest_digest,
        layout,
        archive: archive_path,
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_files_the_loader_opens() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
        let missing = parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err();
        assert!(missing.to_string().contains("libfoo.so.1"), "{missing}");
    }

    #[test]
    fn tar_entries_are_sorted_owned_by_root_and_undated() {
        let mut entries = BTreeMap::new();
        add_parents(&mut entries, "etc/ssl/certs/x");
        entries.insert(
            "etc/ssl/certs/x".into(),
            Entry::File {
                mode: 0o644,
                bytes: b"x".to_vec(),
            },
        );
        entries.insert("b".into(), Entry::Dir(0o755));
        let bytes = tar_bytes(&entries).unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let seen: Vec<(String, u64, u64, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.mtime().unwrap(),
                    h.uid().unwrap(),
                    h.gid().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("b/", 0, 0, 0),
                ("etc/", 0, 0, 0),
                ("etc/ssl/", 0, 0, 0),
                ("etc/ssl/certs/", 0, 0, 0),
                ("etc/ssl/certs/x", 0, 0, 0),
            ]
            .map(|(p, m, u, g)| (p.to_owned(), m, u, g))
        );
        assert_eq!(gzip(&bytes).unwrap(), gzip(&bytes).unwrap());
    }
}
