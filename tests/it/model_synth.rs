//! Synthetic GGUFs: tiny shapes written and read back, full shapes checked by size and header.

use crate::support;

use qtune::model::{self, gguf, synth};

fn vocab_dir() -> std::path::PathBuf {
    synth::default_vocab_dir()
}

#[test]
fn tiny_shapes_round_trip_through_the_reader() {
    if !support::vocab() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for name in ["tiny-qwen35moe", "tiny-qwen3moe"] {
        let shape = synth::shape_by_name(name).unwrap();
        for ftype in [synth::SynthFtype::Q4KM, synth::SynthFtype::Q8_0] {
            let p = dir.path().join(format!("{name}.gguf"));
            let n = synth::write_synthetic(&p, &shape, ftype).unwrap();
            assert_eq!(std::fs::metadata(&p).unwrap().len(), n);
            assert_eq!(
                synth::synthetic_file_size(&shape, ftype, &vocab_dir()).unwrap(),
                n
            );
            let g = gguf::read(&p).unwrap();
            let l = model::load(&p).unwrap();
            assert_eq!(l.arch, shape.arch);
            assert_eq!(l.n_blocks, 4);
            assert_eq!(l.n_experts, 8);
            assert_eq!(l.n_experts_used, 2);
            assert_eq!(l.n_vocab, shape.n_vocab);
            let last = g.tensors.iter().max_by_key(|t| t.offset).unwrap();
            let end = g.data_offset + last.offset + last.n_bytes;
            assert!(end <= n && n - end < 32, "data ends at end of file");
            assert_eq!(l.tensor_bytes, g.tensor_bytes());
            assert!(l.blocks.iter().all(|b| b.routed_experts > 0));
            if shape.arch == "qwen35moe" {
                assert_eq!(l.kv_blocks, [false, false, false, true]);
                assert!(l.recurrent_state_bytes[0] > 0 && l.recurrent_state_bytes[3] == 0);
                assert!(l.blocks.iter().all(|b| b.shared_experts > 0));
            } else {
                assert!(l.kv_blocks.iter().all(|&b| b));
            }
            assert_eq!(l.file_type.as_deref(), Some(ftype.name().as_str()));
            // No temp file left behind.
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("qtune-tmp"))
                .collect();
            assert!(left.is_empty(), "{left:?}");
        }
    }
}

#[test]
fn full_shapes_have_the_real_sizes() {
    if !support::vocab() {
        return;
    }
    let q35 = synth::shape_by_name("qwen3.5-35b-a3b").unwrap();
    let n = synth::synthetic_file_size(&q35, synth::SynthFtype::Q4KM, &vocab_dir()).unwrap();
    println!("qwen3.5-35b-a3b q4_k_m: {n} bytes");
    // The lead's writer made 21,117,790,336 bytes without the MTP block; tensor data is
    // identical, headers (tokenizer padding names, general.* keys) differ by a few KB.
    let trunk = synth::SynthShape {
        nextn_layers: 0,
        ..q35.clone()
    };
    let n0 = synth::synthetic_file_size(&trunk, synth::SynthFtype::Q4KM, &vocab_dir()).unwrap();
    assert!(n0.abs_diff(21_117_790_336) < 64 * 1024, "{n0}");
    // The MTP block (546,703,360 bytes) moves block 35's attn_v from Q6_K to Q4_K (270,336
    // bytes less): the quantizer's more-bits rule counts 11 attention blocks, not 10. Its 20
    // tensors' header entries and one key add about a KB.
    let data = |s: &synth::SynthShape| -> u64 {
        synth::tensor_specs(s, synth::SynthFtype::Q4KM)
            .iter()
            .map(|t| t.bytes().unwrap())
            .sum()
    };
    assert_eq!(data(&q35) - data(&trunk), 546_703_360 - 270_336);
    assert!((n - n0).abs_diff(546_703_360 - 270_336) < 4096, "{n} {n0}");
    let specs = synth::tensor_specs(&q35, synth::SynthFtype::Q4KM);
    let data: u64 = specs.iter().map(|t| t.bytes().unwrap()).sum();
    println!("qwen3.5-35b-a3b q4_k_m tensor data: {data} bytes");
    let q3 = synth::shape_by_name("qwen3-30b-a3b").unwrap();
    let n3 = synth::synthetic_file_size(&q3, synth::SynthFtype::Q4KM, &vocab_dir()).unwrap();
    println!("qwen3-30b-a3b q4_k_m: {n3} bytes");
    for s in [&q35, &q3] {
        let n = synth::synthetic_file_size(s, synth::SynthFtype::Q8_0, &vocab_dir()).unwrap();
        println!("{} q8_0: {n} bytes", s.name);
    }
}

#[test]
fn full_shapes_read_back_and_weights_add_up() {
    if !support::vocab() {
        return;
    }
    use qtune::config::LaunchConfig;
    use qtune::model::memory;
    let dir = tempfile::tempdir().unwrap();
    for (name, blocks, experts, kv_blocks) in [
        ("qwen3.5-35b-a3b", 40, 256, 10),
        ("qwen3-30b-a3b", 48, 128, 48),
    ] {
        let shape = synth::shape_by_name(name).unwrap();
        let p = dir.path().join(format!("{name}.gguf"));
        let n =
            synth::write_sparse_header(&p, &shape, synth::SynthFtype::Q4KM, &vocab_dir()).unwrap();
        let l = model::load(&p).unwrap();
        assert_eq!(l.file_bytes, n);
        assert_eq!(l.n_blocks, blocks);
        assert_eq!(l.n_experts, experts);
        assert_eq!(l.n_experts_used, 8);
        assert_eq!(l.kv_blocks.iter().filter(|&&k| k).count(), kv_blocks);
        assert_eq!(l.file_type.as_deref(), Some("Q4_K_M"));
        let specs_bytes: u64 = synth::tensor_specs(&shape, synth::SynthFtype::Q4KM)
            .iter()
            .map(|t| t.bytes().unwrap())
            .sum();
        assert_eq!(l.tensor_bytes, specs_bytes);
        for (gpu, ncmoe) in [
            (false, None),
            (true, Some(0)),
            (true, Some(17)),
            (true, Some(99)),
        ] {
            let cfg = LaunchConfig {
                n_cpu_moe: ncmoe,
                ..LaunchConfig::baseline(32768)
            };
            // The MTP block (Qwen3.5's) is loaded only to draft with it.
            let b = memory::predict(&l, &cfg, gpu).breakdown;
            let mtp = l.details.mtp_bytes;
            assert_eq!(
                b.weights_gpu_bytes + b.weights_host_bytes + mtp,
                l.tensor_bytes
            );
            let drafting = LaunchConfig {
                spec_type: Some(qtune::config::SpecType::DraftMtp),
                ..cfg
            };
            let b = memory::predict(&l, &drafting, gpu).breakdown;
            assert_eq!(b.weights_gpu_bytes + b.weights_host_bytes, l.tensor_bytes);
        }
        let mtp_bytes = if name == "qwen3.5-35b-a3b" {
            546_703_360
        } else {
            0
        };
        assert_eq!(l.details.mtp_bytes, mtp_bytes);
        if name == "qwen3.5-35b-a3b" {
            // 30 delta-net blocks: conv (4-1)*(4096+2*16*128) + state 128*4096 floats each.
            assert_eq!(l.recurrent_state_bytes[0], (3 * 8192 + 128 * 4096) * 4);
            assert_eq!(l.recurrent_state_bytes[3], 0);
        }
    }
}

#[test]
/// Q4_K_L and MXFP4_MOE follow their recipes (issue 46): the tensor types `qtune plan --quant`
/// lays out a model not downloaded from.
fn each_quantization_follows_its_recipe() {
    let shape = synth::shape_by_name("qwen3.5-35b-a3b").unwrap();
    let ty = |f: synth::SynthFtype, name: &str| {
        synth::tensor_specs(&shape, f)
            .into_iter()
            .find(|t| t.name == name)
            .unwrap()
            .ggml_type
    };
    use qtune::model::ggml_type::GgmlType as T;
    let q4km = synth::SynthFtype::Q4KM;
    assert_eq!(ty(q4km, "output.weight"), T::Q6_K);
    assert_eq!(ty(q4km, "token_embd.weight"), T::Q4_K);
    assert_eq!(ty(q4km, "blk.0.ffn_down_exps.weight"), T::Q6_K);
    // Q4_K_L: Q4_K_M with Q8_0 embedding and output.
    let q4kl = synth::SynthFtype::Q4KL;
    assert_eq!(ty(q4kl, "output.weight"), T::Q8_0);
    assert_eq!(ty(q4kl, "token_embd.weight"), T::Q8_0);
    assert_eq!(ty(q4kl, "blk.5.ffn_up_exps.weight"), T::Q4_K);
    assert_eq!(ty(q4kl, "blk.0.ffn_down_exps.weight"), T::Q6_K);
    // MXFP4_MOE: routed experts MXFP4, every other matrix Q8_0, norms F32.
    let mx = synth::SynthFtype::Mxfp4Moe;
    for t in ["ffn_up_exps", "ffn_gate_exps", "ffn_down_exps"] {
        assert_eq!(ty(mx, &format!("blk.0.{t}.weight")), T::MXFP4);
    }
    for t in ["ffn_up_shexp", "attn_qkv", "ssm_out"] {
        assert_eq!(ty(mx, &format!("blk.0.{t}.weight")), T::Q8_0, "{t}");
    }
    assert_eq!(ty(mx, "output.weight"), T::Q8_0);
    assert_eq!(ty(mx, "blk.0.attn_norm.weight"), T::F32);
    assert_eq!(mx.file_type(), 38);
}
