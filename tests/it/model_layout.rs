//! Layout of a real model (SmolLM2-135M, dense llama) read from its GGUF header.

use crate::support;

use qtune::model::{self, gguf};

#[test]
fn smollm2_layout_is_dense_llama_and_bytes_add_up() {
    let Some(path) = support::smollm2() else {
        return;
    };
    let g = gguf::read(&path).unwrap();
    let l = model::load(&path).unwrap();
    assert_eq!(l.arch, "llama");
    assert_eq!(l.n_blocks, 30);
    assert!(!l.is_moe());
    assert_eq!(l.n_embd, 576);
    assert_eq!(l.n_head, 9);
    assert_eq!(l.n_head_kv, 3);
    assert_eq!(l.head_dim_k, 64);
    assert_eq!(l.n_vocab, 49152);
    assert_eq!(l.file_type.as_deref(), Some("Q4_1"));
    assert!(l.kv_blocks.iter().all(|&b| b));
    assert!(l.recurrent_state_bytes.iter().all(|&b| b == 0));
    // Tied output: no output.weight in the file.
    assert_eq!(l.output_bytes, 0);
    let sum: u64 = l.blocks.iter().map(|b| b.total()).sum::<u64>()
        + l.token_embd_bytes
        + l.output_bytes
        + l.other_bytes;
    assert_eq!(sum, l.tensor_bytes);
    assert_eq!(l.tensor_bytes, g.tensor_bytes());
    assert_eq!(l.bytes_by_type.values().sum::<u64>(), l.tensor_bytes);
    // The data section ends at the end of the file (no trailing junk in this file).
    assert!(g.data_offset + l.tensor_bytes <= l.file_bytes);
    assert_eq!(l.fingerprint.len(), 16);
    assert_eq!(model::load(&path).unwrap().fingerprint, l.fingerprint);
}
