//! Model layouts the replay tests share.

use qtune::model::{BlockBytes, ModelLayout};

const MIB: u64 = 1 << 20;

/// A qwen3.5-35b-a3b-like layout: 40 blocks, ~420 MiB of routed experts each.
pub fn qwen35_like() -> ModelLayout {
    qwen35_like_sized(420, 4, 30, 300)
}

/// A qwen3.5-35b-a3b-like layout of 40 blocks, each with these routed experts, shared experts
/// and other tensors (MiB), and an embedding and output of `embd` MiB each.
pub fn qwen35_like_sized(routed: u64, shared: u64, rest: u64, embd: u64) -> ModelLayout {
    let blocks: Vec<BlockBytes> = (0..40)
        .map(|_| BlockBytes {
            routed_experts: routed * MIB,
            shared_experts: shared * MIB,
            rest: rest * MIB,
        })
        .collect();
    let tensor_bytes = blocks.iter().map(|b| b.total()).sum::<u64>() + 2 * embd * MIB;
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
        token_embd_bytes: embd * MIB,
        output_bytes: embd * MIB,
        tensor_bytes,
        ..ModelLayout::uniform(40, 256, 0, 0)
    }
}

/// The search's context for [`qwen35_like`] on one GPU with `budget_mib` of VRAM budget, a
/// 16-core host and `space`: what the replay tests tune against.
pub fn one_gpu_context(
    space: qtune::space::SearchSpace,
    budget_mib: f64,
) -> qtune::search::strategy::SearchContext {
    qtune::search::strategy::SearchContext {
        space,
        layout: qwen35_like(),
        gpu_moe: true,
        has_gpu: true,
        budget_mib: Some(budget_mib),
        physical_cores: 16,
        logical_cores: 32,
        start: None,
        clock: qtune::clock::system(),
        ram_available_mib: None,
        fit_target_mib: 512,
        gpus: Vec::new(),
        workload_traits: Default::default(),
        speed: None,
        server_versions: Vec::new(),
    }
}
