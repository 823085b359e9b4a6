//! A model split over several files (`llama-gguf-split`, and every upload past a hub's
//! 50 GB file limit): `NAME-00001-of-00003.gguf` holds the metadata and the first tensors,
//! the other parts the rest. llama-server is given the first part and finds the others by
//! that name; qtune reads them all the same way, so that the weights it places and counts are
//! the whole model's, not the first part's.

use super::gguf::{self, Extent, GgufFile};
use anyhow::{bail, Result};
use std::path::Path;

/// The most parts a split model may have (llama.cpp numbers them in five digits).
pub const MAX_PARTS: u64 = 99_999;

/// Read a model file; a split model's first part is read with all its other parts, into one
/// header whose tensors and size are the whole model's.
pub fn read_model(path: &Path) -> Result<GgufFile> {
    read_parts(path, Extent::Whole)
}

/// [`read_model`], each part read as `extent` asks (its header only, for `qtune plan`).
pub fn read_parts(path: &Path, extent: Extent) -> Result<GgufFile> {
    let mut whole = gguf::read_with(path, extent)?;
    let Some(split) = Split::of_path(&whole, path)? else {
        return Ok(whole);
    };
    for i in 1..split.count {
        let part_path = path.with_file_name(split.part_name(i));
        if !part_path.exists() {
            bail!(
                "{} is missing: a model split in {} files needs every part beside its first",
                part_path.display(),
                split.count
            );
        }
        let part = gguf::read_with(&part_path, extent)?;
        split.add(&mut whole, i, part, &part_path.display().to_string())?;
    }
    split.check(&whole)?;
    Ok(whole)
}

/// The files of the model at `path`: itself, or a split model's every part (from its header;
/// just `path` where that cannot be read).
pub fn part_paths(path: &Path) -> Vec<std::path::PathBuf> {
    let split = gguf::read_with(path, Extent::HeaderOnly)
        .ok()
        .and_then(|g| Split::of_path(&g, path).ok().flatten());
    match split {
        Some(s) => (0..s.count)
            .map(|i| path.with_file_name(s.part_name(i)))
            .collect(),
        None => vec![path.to_path_buf()],
    }
}

/// The first part of a model split in `count` files, and how its other parts are named.
#[derive(Debug, Clone)]
pub struct Split {
    pub count: u64,
    /// The name before `-00001-of-0000N.gguf`.
    prefix: String,
    /// The first part, as messages show it.
    shown: String,
}

impl Split {
    /// `Some` when `g` (read from a file or URL whose last name is `name`) is part of a split
    /// model; refused in one line unless it is the first part, named as llama-server needs.
    pub fn of(g: &GgufFile, name: &str, shown: &str) -> Result<Option<Split>> {
        let count = match g.get_u64("split.count") {
            None | Some(0 | 1) => return Ok(None),
            Some(n) if n > MAX_PARTS => bail!(
                "{shown} says it is one of {n} parts: more than llama.cpp numbers ({MAX_PARTS}); \
                 the header is corrupt"
            ),
            Some(n) => n,
        };
        let no = g.get_u64("split.no").unwrap_or(0);
        let suffix = part_suffix(no, count);
        let Some(prefix) = name.strip_suffix(&suffix) else {
            bail!(
                "{shown} is part {} of a model split in {count} files, but its name does not end \
                 in '{suffix}': llama-server finds the other parts by that name (rename the parts \
                 as llama-gguf-split wrote them)",
                no + 1
            );
        };
        if no != 0 {
            bail!(
                "{shown} is part {} of a model split in {count} files: give its first part, \
                 {prefix}{}",
                no + 1,
                part_suffix(0, count)
            );
        }
        Ok(Some(Split {
            count,
            prefix: prefix.to_string(),
            shown: shown.to_string(),
        }))
    }

    /// [`Split::of`] for a file: named by its last name, shown by its path.
    pub fn of_path(g: &GgufFile, path: &Path) -> Result<Option<Split>> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self::of(g, &name, &path.display().to_string())
    }

    /// The file name of part `index` (0 is the first).
    pub fn part_name(&self, index: u64) -> String {
        format!("{}{}", self.prefix, part_suffix(index, self.count))
    }

    /// Add part `index` (read from `shown`) to the model read so far.
    pub fn add(&self, whole: &mut GgufFile, index: u64, part: GgufFile, shown: &str) -> Result<()> {
        let count = self.count;
        if part.get_u64("split.count") != Some(count) || part.get_u64("split.no") != Some(index) {
            bail!(
                "{shown} is not part {} of {count} of {}: its header says otherwise (a part of \
                 another split?)",
                index + 1,
                self.shown
            );
        }
        // Offsets stay in file order across the parts (the layout compares them).
        let base = whole.file_len;
        whole.tensors.extend(part.tensors.into_iter().map(|mut t| {
            t.offset = t.offset.saturating_add(base);
            t
        }));
        whole.file_len = whole.file_len.saturating_add(part.file_len);
        Ok(())
    }

    /// Every part added: the tensors are as many as the first part says.
    pub fn check(&self, whole: &GgufFile) -> Result<()> {
        match whole.get_u64("split.tensors.count") {
            Some(n) if n != whole.tensors.len() as u64 => bail!(
                "the {} parts of {} hold {} tensors, and its first part says {n}: a part is \
                 missing tensors or comes from another model",
                self.count,
                self.shown,
                whole.tensors.len()
            ),
            _ => Ok(()),
        }
    }
}

/// `-00002-of-00003.gguf` for part index 1 of 3 (llama.cpp's `llama_split_path`).
fn part_suffix(index: u64, count: u64) -> String {
    format!("-{:05}-of-{count:05}.gguf", index + 1)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::ggml_type::GgmlType;
    use crate::model::gguf::{write_gguf, GgufValue, TensorSpec};
    use std::path::PathBuf;

    /// A small qwen3moe-like model's metadata (the header tests' too).
    pub(crate) fn metadata() -> Vec<(String, GgufValue)> {
        let s = |v: &str| GgufValue::String(v.into());
        vec![
            ("general.architecture".to_string(), s("qwen3moe")),
            ("qwen3moe.block_count".into(), GgufValue::U32(2)),
            ("qwen3moe.embedding_length".into(), GgufValue::U32(256)),
            ("qwen3moe.attention.head_count".into(), GgufValue::U32(4)),
            ("qwen3moe.attention.head_count_kv".into(), GgufValue::U32(2)),
            ("qwen3moe.expert_count".into(), GgufValue::U32(4)),
            ("qwen3moe.expert_used_count".into(), GgufValue::U32(2)),
            ("qwen3moe.context_length".into(), GgufValue::U32(4096)),
        ]
    }

    /// Its tensors for `blocks`: an attention and an expert tensor each.
    pub(crate) fn tensors(blocks: std::ops::Range<u32>) -> Vec<TensorSpec> {
        blocks
            .flat_map(|b| {
                [
                    TensorSpec {
                        name: format!("blk.{b}.attn_q.weight"),
                        dims: vec![256, 256],
                        ggml_type: GgmlType::Q4_K,
                    },
                    TensorSpec {
                        name: format!("blk.{b}.ffn_up_exps.weight"),
                        dims: vec![256, 512, 4],
                        ggml_type: GgmlType::Q4_K,
                    },
                ]
            })
            .collect()
    }

    fn write(path: &Path, md: &[(String, GgufValue)], ts: &[TensorSpec]) {
        let mut out = Vec::new();
        write_gguf(&mut out, md, ts, 32, |_, t, w| {
            w.write_all(&vec![0u8; t.bytes().unwrap() as usize])
        })
        .unwrap();
        std::fs::write(path, out).unwrap();
    }

    fn split_keys(no: u16, count: u16, tensors: i32) -> Vec<(String, GgufValue)> {
        vec![
            ("split.no".into(), GgufValue::U16(no)),
            ("split.count".into(), GgufValue::U16(count)),
            ("split.tensors.count".into(), GgufValue::I32(tensors)),
        ]
    }

    /// The whole model, and the same model split in two parts as llama-gguf-split writes it
    /// (the metadata in the first part, the split keys in both).
    fn whole_and_split(dir: &Path) -> (PathBuf, PathBuf) {
        let whole = dir.join("m.gguf");
        write(&whole, &metadata(), &tensors(0..2));
        let mut md = metadata();
        md.extend(split_keys(0, 2, 4));
        let first = dir.join("m-00001-of-00002.gguf");
        write(&first, &md, &tensors(0..1));
        write(
            &dir.join("m-00002-of-00002.gguf"),
            &split_keys(1, 2, 4),
            &tensors(1..2),
        );
        (whole, first)
    }

    #[test]
    fn a_split_model_reads_as_the_whole_model() {
        let d = tempfile::tempdir().unwrap();
        let (whole, first) = whole_and_split(d.path());
        let one = crate::model::load(&whole).unwrap();
        let parts = crate::model::load(&first).unwrap();
        assert_eq!(parts.fingerprint, one.fingerprint);
        assert_eq!(parts.n_blocks, one.n_blocks);
        let on_disk: u64 = ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]
            .iter()
            .map(|n| std::fs::metadata(d.path().join(n)).unwrap().len())
            .sum();
        assert_eq!(parts.file_bytes, on_disk);
        // The first part alone held half the weights: what qtune counted before.
        let alone = super::super::layout::from_gguf(&gguf::read(&first).unwrap()).unwrap();
        assert_ne!(alone.fingerprint, one.fingerprint);
    }

    #[test]
    fn a_split_model_that_cannot_be_read_whole_is_refused_in_one_line() {
        let d = tempfile::tempdir().unwrap();
        let (_, first) = whole_and_split(d.path());
        let second = d.path().join("m-00002-of-00002.gguf");
        let err = |p: &Path| {
            let e = format!("{:#}", read_model(p).unwrap_err());
            assert_eq!(e.lines().count(), 1, "{e}");
            e
        };
        // The second part given: the first is named.
        let e = err(&second);
        assert!(e.contains("part 2 of a model split in 2") && e.contains("m-00001-of-00002.gguf"));
        // Renamed: llama-server could not find the others either.
        let renamed = d.path().join("model.gguf");
        std::fs::copy(&first, &renamed).unwrap();
        assert!(err(&renamed).contains("does not end in '-00001-of-00002.gguf'"));
        // A part of another model in its place.
        let mut md = metadata();
        md.extend(split_keys(0, 2, 4));
        write(&second, &md, &tensors(1..2));
        assert!(err(&first).contains("is not part 2 of 2"));
        // Too few tensors.
        write(&second, &split_keys(1, 2, 4), &tensors(1..1));
        assert!(err(&first).contains("hold 2 tensors, and its first part says 4"));
        // Missing.
        std::fs::remove_file(&second).unwrap();
        assert!(err(&first).contains("m-00002-of-00002.gguf is missing"));
    }
}
