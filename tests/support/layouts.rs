//! Model layouts the replay tests share.

use qtune::model::{BlockBytes, ModelLayout};

const MIB: u64 = 1 << 20;

/// A qwen3.5-35b-a3b-like layout: 40 blocks, ~420 MiB of routed experts each.
pub fn qwen35_like() -> ModelLayout {
    let blocks: Vec<BlockBytes> = (0..40)
        .map(|_| BlockBytes {
            routed_experts: 420 * MIB,
            shared_experts: 4 * MIB,
            rest: 30 * MIB,
        })
        .collect();
    let tensor_bytes = blocks.iter().map(|b| b.total()).sum::<u64>() + 2 * 300 * MIB;
    ModelLayout {
        arch: "qwen35moe".into(),
        file_bytes: tensor_bytes + 10 * MIB,
        n_head: 16,
        n_head_kv: 2,
        head_dim_k: 256,
        head_dim_v: 256,
        n_vocab: 248_320,
        ctx_train: 262_144,
        kv_blocks: (0..40).map(|i| (i + 1) % 4 == 0).collect(),
        recurrent_state_bytes: (0..40)
            .map(|i| if (i + 1) % 4 == 0 { 0 } else { 1 << 20 })
            .collect(),
        blocks,
        token_embd_bytes: 300 * MIB,
        output_bytes: 300 * MIB,
        tensor_bytes,
        ..ModelLayout::uniform(40, 256, 0, 0)
    }
}
