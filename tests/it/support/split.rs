//! A model split in parts as `llama-gguf-split --split` writes it: `STEM-00001-of-0000N.gguf`
//! holds the metadata, its first tensors and the `split.*` keys; each other part holds the
//! `split.*` keys and its tensors, byte for byte from the whole file.

use qtune::model::gguf::{self, GgufValue, TensorSpec};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Split `model` in `parts` files of about as many tensors each, in `dir`; returns the first.
pub fn split(model: &Path, dir: &Path, stem: &str, parts: usize) -> PathBuf {
    let g = gguf::read(model).unwrap();
    let bytes = std::fs::read(model).unwrap();
    let n = g.tensors.len();
    let per = n.div_ceil(parts);
    let keys = |no: usize| {
        vec![
            ("split.no".to_string(), GgufValue::U16(no as u16)),
            ("split.count".to_string(), GgufValue::U16(parts as u16)),
            ("split.tensors.count".to_string(), GgufValue::I32(n as i32)),
        ]
    };
    let path = |no: usize| dir.join(format!("{stem}-{:05}-of-{parts:05}.gguf", no + 1));
    for (no, chunk) in g.tensors.chunks(per).enumerate() {
        let mut md = if no == 0 {
            g.metadata.clone()
        } else {
            Vec::new()
        };
        md.extend(keys(no));
        let specs: Vec<TensorSpec> = chunk.iter().map(|t| t.spec()).collect();
        let mut out = std::io::BufWriter::new(std::fs::File::create(path(no)).unwrap());
        gguf::write_gguf(&mut out, &md, &specs, g.alignment, |i, _, w| {
            let t = &chunk[i];
            let start = (g.data_offset + t.offset) as usize;
            w.write_all(&bytes[start..start + t.n_bytes as usize])
        })
        .unwrap();
        out.flush().unwrap();
    }
    path(0)
}
