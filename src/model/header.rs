//! A model's layout from its GGUF header alone, for `qtune plan`: a file holding only the first
//! megabytes of a model (`curl -L -r 0-16777215 URL -o head.gguf`), or a plain-http:// URL whose
//! header is read with one bounded Range request. The tensor infos give every tensor's type and
//! shape, so the layout is the whole file's. Every other command reads whole files
//! ([`super::gguf::read`]): a server cannot load a header.

use super::gguf::{self, shown, Extent, GgufError, GgufFile};
use super::ModelLayout;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most bytes read for a header (the most a header may take), low enough to bound what a
/// server can send.
pub const MAX_HEADER_BYTES: u64 = gguf::MAX_HEADER_BYTES;

/// Seconds a URL's header may take, the connection included (`QTUNE_HTTP_TIMEOUT_S` overrides,
/// up to [`MAX_HTTP_TIMEOUT_S`]).
pub const HTTP_TIMEOUT_S: u64 = 30;

/// The longest `QTUNE_HTTP_TIMEOUT_S` may make it: past this a user-set timeout is refused
/// (with [`MAX_URL_PARTS`] and [`MAX_URL_BYTES`], what a server can make qtune do is bounded).
pub const MAX_HTTP_TIMEOUT_S: u64 = 300;

/// The most parts a split model's header over HTTP may name: the largest published models
/// (1 TB in 50 GB files, or llama-gguf-split's 128 tensors a part) come in a few dozen.
pub const MAX_URL_PARTS: u64 = 256;

/// The most tensors the parts' headers over HTTP may hold in all: a hundred times a large
/// MoE model's thousand or so (each held tensor takes memory until the plan is made).
pub const MAX_URL_TENSORS: u64 = 1 << 17;

/// The most bytes read over HTTP for all parts' headers together.
pub const MAX_URL_BYTES: u64 = 256 << 20;

/// The command that fetches a model's header (its first 16 MiB) for `qtune plan -m`.
pub const CURL_HEADER: &str = "curl -L -r 0-16777215 URL -o head.gguf";

/// A model to plan: read whole, or from its header only.
#[derive(Debug, Clone)]
pub struct PlanSource {
    pub layout: ModelLayout,
    /// The path a launch command names: the file, or for a URL its file name (where a
    /// download of it lands).
    pub command_path: PathBuf,
    /// Set when the plan rests on the header alone.
    pub header_only: Option<HeaderOnly>,
}

/// What a header-only read read.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderOnly {
    /// Bytes of the model read (the file's length, or what came over HTTP).
    pub bytes_read: u64,
    /// The whole file's length, from its tensor infos.
    pub file_bytes: u64,
    /// Read from a URL (the command names the file a download of it makes), not a file.
    pub from_url: bool,
    /// Files the model is split in (1: a single file).
    pub parts: u64,
}

impl HeaderOnly {
    /// One line for the plan: what it rests on, and what to do before starting its command.
    pub fn text(&self, command_path: &Path) -> String {
        let size = if self.file_bytes >= 1_000_000_000 {
            format!("{:.1} GB", self.file_bytes as f64 / 1e9)
        } else {
            format!("{:.0} MB", self.file_bytes as f64 / 1e6)
        };
        let path = crate::escape::terminal_path(command_path);
        let (what, file) = match self.parts {
            0 | 1 => ("the whole file".to_string(), "file".to_string()),
            n => (format!("all {n} parts"), format!("model in {n} files")),
        };
        let todo = if self.from_url {
            format!("download {what} as {path} (the name the command uses) first")
        } else {
            let its = if self.parts > 1 { "the first's" } else { "its" };
            format!("download {what} and start the command with {its} path in place of {path}")
        };
        format!(
            "planned from the GGUF header only (the first {:.1} MiB of a {size} {file}): {todo}",
            self.bytes_read as f64 / (1u64 << 20) as f64,
        )
    }
}

/// The layout of `model` for `qtune plan`: a whole GGUF file, a file holding its header only,
/// or a plain-http:// URL read for its header.
pub fn load_for_plan(model: &Path) -> Result<PlanSource> {
    let text = model.to_string_lossy();
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("https://") {
        bail!(
            "{}: qtune reads a header over plain http:// only (this build has no TLS): fetch the \
             header with `{CURL_HEADER}` and pass -m head.gguf",
            shown(&text, 200)
        );
    }
    if lower.starts_with("http://") {
        return from_url(&text);
    }
    // Every part of a split model, each read for its header (a whole file or its first MiB).
    let g = match super::split::read_parts(model, Extent::HeaderOnly) {
        Err(e) => match e.downcast_ref::<GgufError>() {
            Some(GgufError::Truncated { path, what, .. }) => bail!(
                "{} ends inside its GGUF header ({what}): fetch more of the file, e.g. `curl -L \
                 -r 0-{} URL -o {}`",
                path.display(),
                MAX_HEADER_BYTES - 1,
                path.file_name()
                    .map_or("head.gguf".into(), |n| n.to_string_lossy())
            ),
            _ => return Err(e),
        },
        Ok(g) => g,
    };
    // What is on disk of each part, against what the header says the parts hold.
    let parts: Vec<PathBuf> = match super::split::Split::of_path(&g, model)? {
        Some(split) => (0..split.count)
            .map(|i| model.with_file_name(split.part_name(i)))
            .collect(),
        None => vec![model.to_path_buf()],
    };
    let present: u64 = parts
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum::<u64>()
        .min(g.file_len);
    let header_only = (present < g.file_len).then_some(HeaderOnly {
        bytes_read: present,
        file_bytes: g.file_len,
        from_url: false,
        parts: parts.len() as u64,
    });
    let layout =
        super::layout::from_gguf(&g).with_context(|| format!("cannot use {}", model.display()))?;
    Ok(PlanSource {
        layout,
        command_path: model.to_path_buf(),
        header_only,
    })
}

fn timeout() -> Result<Duration> {
    crate::util::env_seconds("QTUNE_HTTP_TIMEOUT_S", HTTP_TIMEOUT_S, MAX_HTTP_TIMEOUT_S)
}

/// What is left of the bounds on the headers read over HTTP ([`MAX_URL_TENSORS`],
/// [`MAX_URL_BYTES`]), spent part by part.
struct Room {
    tensors: u64,
    bytes: u64,
}

fn from_url(url: &str) -> Result<PlanSource> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| anyhow!("{} is not a URL qtune can read ({e})", shown(url, 200)))?;
    let limit = timeout()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the HTTP client")?;
    let file = parsed
        .path_segments()
        .and_then(|mut s| s.next_back())
        .filter(|s| !s.is_empty() && *s != "." && *s != "..")
        .unwrap_or("model.gguf")
        .to_string();
    let (g, bytes_read, parts) = rt
        .block_on(async { tokio::time::timeout(limit, fetch_parts(url, &parsed, &file)).await })
        .map_err(|_| {
            anyhow!(
                "{}: no whole GGUF header within {} s (a slow or stalled server): fetch the header \
                 with `{CURL_HEADER}` and pass -m head.gguf",
                shown(url, 200),
                limit.as_secs()
            )
        })??;
    let layout =
        super::layout::from_gguf(&g).with_context(|| format!("cannot use {}", shown(url, 200)))?;
    // Where `curl -O URL` or a browser would save it.
    Ok(PlanSource {
        header_only: Some(HeaderOnly {
            bytes_read,
            file_bytes: g.file_len,
            from_url: true,
            parts,
        }),
        command_path: PathBuf::from(file),
        layout,
    })
}

/// The header of `url` (named `file`, as the URL writes it), and of every other part when it
/// is a split model's first (the same address, the part's name in place of its own): the
/// whole model's header, the bytes read in all, and the number of files.
async fn fetch_parts(url: &str, parsed: &reqwest::Url, file: &str) -> Result<(GgufFile, u64, u64)> {
    let shown_url = shown(url, 200);
    let mut room = Room {
        tensors: MAX_URL_TENSORS,
        bytes: MAX_URL_BYTES,
    };
    let (mut whole, mut read) = fetch(url, &mut room).await?;
    let Some(split) = super::split::Split::of(&whole, file, &shown_url)? else {
        return Ok((whole, read, 1));
    };
    if split.count > MAX_URL_PARTS {
        bail!(
            "{shown_url} says it is the first of {} parts: more than the {MAX_URL_PARTS} qtune \
             reads over HTTP; fetch each part's header with `{CURL_HEADER}` and pass -m with the \
             first",
            split.count
        );
    }
    // The tensors the first part says all parts hold bound what the others may add.
    if let Some(n) = whole.get_u64("split.tensors.count") {
        if n > MAX_URL_TENSORS {
            bail!(
                "{shown_url} says its parts hold {n} tensors: more than the {MAX_URL_TENSORS} a \
                 model's headers may hold over HTTP; the header is corrupt"
            );
        }
        room.tensors = n.saturating_sub(whole.tensors.len() as u64);
    }
    let dir = parsed.path().rsplit_once('/').map_or("", |(d, _)| d);
    for i in 1..split.count {
        let mut part_url = parsed.clone();
        part_url.set_path(&format!("{dir}/{}", split.part_name(i)));
        let (part, n) = fetch(part_url.as_str(), &mut room).await?;
        split.add(&mut whole, i, part, &shown(part_url.as_str(), 200))?;
        read += n;
    }
    split.check(&whole)?;
    Ok((whole, read, split.count))
}

/// An error and its causes on one line ("error sending request: ...: Connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    shown(&s, 300)
}

/// GET the first [`MAX_HEADER_BYTES`] of `url` and parse its header as soon as the bytes so far
/// hold it, then drop the connection: the header, and what is in flight, is all that is read.
async fn fetch(url: &str, room: &mut Room) -> Result<(GgufFile, u64)> {
    let shown_url = shown(url, 200);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::custom(|a| {
            if a.url().scheme() != "http" {
                a.stop()
            } else if a.previous().len() >= 5 {
                a.error("more than 5 redirects")
            } else {
                a.follow()
            }
        }))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .context("cannot start the HTTP client")?;
    let mut resp = client
        .get(url)
        .header(
            reqwest::header::RANGE,
            format!("bytes=0-{}", MAX_HEADER_BYTES - 1),
        )
        .send()
        .await
        .map_err(|e| anyhow!("cannot read {shown_url}: {}", chain(&e)))?;
    let status = resp.status();
    if status.is_redirection() {
        let to = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("another address");
        bail!(
            "{shown_url} redirects to {}, which is not plain http:// (this build has no TLS): \
             fetch the header with `{CURL_HEADER}` and pass -m head.gguf",
            shown(to, 200)
        );
    }
    if status != reqwest::StatusCode::OK && status != reqwest::StatusCode::PARTIAL_CONTENT {
        bail!("{shown_url} answered HTTP {status}: check the URL");
    }
    // bytes 0-N/TOTAL: the whole file's length, when the server says it (TOTAL "*": unknown).
    let range = resp
        .headers()
        .get(reqwest::header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes 0-"))
        .and_then(|v| v.split_once('/'));
    if status == reqwest::StatusCode::PARTIAL_CONTENT && range.is_none() {
        bail!("{shown_url} answered a range that does not start at byte 0: check the URL");
    }
    let total: Option<u64> = range.and_then(|(_, t)| t.trim().parse().ok());
    let name = PathBuf::from(url);
    // The bytes left of all parts' room: a part past it is refused as a header past 64 MiB is.
    let max = MAX_HEADER_BYTES.min(room.bytes) as usize;
    let mut buf: Vec<u8> = Vec::new();
    // Parse at 1 MiB, then each time half as much again has come.
    let mut next = 1usize << 20;
    loop {
        let chunk = resp
            .chunk()
            .await
            .map_err(|e| anyhow!("cannot read {shown_url}: {}", chain(&e)))?;
        let done = chunk.is_none();
        if let Some(c) = chunk {
            let room = max - buf.len();
            buf.extend_from_slice(&c[..c.len().min(room)]);
        }
        let full = buf.len() >= max;
        if !(done || full || buf.len() >= next) {
            continue;
        }
        // The tensor count is known before the tensor infos are parsed (and held): GGUF's
        // magic, version, then the count.
        if let Some(n) = buf.get(8..16).filter(|_| buf.starts_with(b"GGUF")) {
            let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
            if n > room.tensors {
                bail!(
                    "{shown_url} claims {n} tensors, past the {} left of the {MAX_URL_TENSORS} a \
                     model's headers may hold over HTTP (all parts together): not a model qtune \
                     can plan",
                    room.tensors
                );
            }
        }
        match gguf::parse_bytes(&buf, &name, Extent::HeaderOnly) {
            Ok(g) => {
                room.tensors = room.tensors.saturating_sub(g.tensors.len() as u64);
                room.bytes = room.bytes.saturating_sub(buf.len() as u64);
                if let Some(t) = total.filter(|&t| t < g.file_len) {
                    bail!(
                        "{shown_url} is cut off: {t} bytes on the server, but its tensors need \
                         {} (re-upload or pick another file)",
                        g.file_len
                    );
                }
                return Ok((g, buf.len() as u64));
            }
            Err(GgufError::Truncated { .. }) if !done && !full => {
                next = buf.len() + buf.len() / 2;
            }
            Err(GgufError::Truncated { .. }) if full && (max as u64) < MAX_HEADER_BYTES => bail!(
                "{shown_url}: the parts' GGUF headers go on past {} MiB in all, more than any \
                 model's: not a model qtune can plan",
                MAX_URL_BYTES >> 20
            ),
            Err(GgufError::Truncated { .. }) if full => bail!(
                "{shown_url}: its GGUF header goes on past {} MiB, more than any model's: not \
                 a model qtune can plan",
                MAX_HEADER_BYTES >> 20
            ),
            Err(GgufError::Truncated { what, .. }) => bail!(
                "{shown_url} ends inside its GGUF header ({what}): the file on the server is cut \
                 off"
            ),
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::{write_gguf, GgufValue};

    /// A small qwen3moe-like model with `extra` metadata, written whole; its bytes.
    fn model_bytes(extra: &[(&str, GgufValue)]) -> Vec<u8> {
        let mut md = crate::model::split::tests::metadata();
        md.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let ts = crate::model::split::tests::tensors(0..2);
        let mut out = Vec::new();
        write_gguf(&mut out, &md, &ts, 32, |_, t, w| {
            w.write_all(&vec![0u8; t.bytes().unwrap() as usize])
        })
        .unwrap();
        out
    }

    #[test]
    fn a_header_only_file_has_the_whole_files_layout() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = model_bytes(&[]);
        let whole = dir.path().join("whole.gguf");
        std::fs::write(&whole, &bytes).unwrap();
        let g = gguf::read(&whole).unwrap();
        let head = dir.path().join("head.gguf");
        std::fs::write(&head, &bytes[..g.data_offset as usize + 100]).unwrap();
        // Every other command refuses the cut file as before.
        assert!(matches!(
            gguf::read(&head),
            Err(GgufError::Truncated { .. })
        ));
        let full = load_for_plan(&whole).unwrap();
        assert_eq!(full.header_only, None);
        let part = load_for_plan(&head).unwrap();
        assert_eq!(part.layout, full.layout);
        assert_eq!(
            part.header_only,
            Some(HeaderOnly {
                bytes_read: g.data_offset + 100,
                file_bytes: bytes.len() as u64,
                from_url: false,
                parts: 1,
            })
        );
        assert!(part
            .header_only
            .unwrap()
            .text(&part.command_path)
            .contains("header only"));
        // Cut inside the header: a one-line error that says to fetch more.
        std::fs::write(&head, &bytes[..g.data_offset as usize / 2]).unwrap();
        let e = load_for_plan(&head).unwrap_err().to_string();
        assert!(
            e.contains("ends inside its GGUF header") && e.contains("curl"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn https_says_to_fetch_the_header_with_curl() {
        let e = load_for_plan(Path::new("https://example.org/m.gguf"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no TLS") && e.contains(CURL_HEADER), "{e}");
        assert_eq!(e.lines().count(), 1);
    }
}
