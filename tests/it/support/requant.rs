//! Other quantizations of a real Q4_1 model, for tests that compare quants of one model
//! (`qtune quality --against`): [`requantize`] reads the GGUF with qtune's reader, dequantizes
//! each Q4_1 tensor and writes it again as Q8_0 (near-lossless against the original) or Q4_0
//! (lossy), copying the metadata and every other tensor byte for byte.
//!
//! Block layouts and rounding from llama.cpp b11434 (`ggml/src/ggml-common.h`,
//! `ggml/src/ggml-quants.c`), 32 weights a block:
//! - Q4_1: f16 d, f16 m, 16 bytes of nibbles; `x[j] = (qs[j] & 15) * d + m`,
//!   `x[j + 16] = (qs[j] >> 4) * d + m` (`dequantize_row_q4_1`).
//! - Q8_0: f16 d, 32 i8; `d = amax / 127`, `q = roundf(x / d)` (`quantize_row_q8_0_ref`).
//! - Q4_0: f16 d, 16 bytes of nibbles; `d = max / -8` (max: the value of largest magnitude,
//!   sign kept), `q = min(15, (int8)(x / d + 8.5))`, low nibbles the first 16
//!   (`quantize_row_q4_0_ref`).

use qtune::model::ggml_type::GgmlType;
use qtune::model::gguf::{self, GgufValue, TensorSpec};
use std::io::Write;
use std::path::Path;

/// IEEE half to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f32::from(h & 0x3ff);
    match exp {
        0 => sign * man * 2f32.powi(-24),
        0x1f if man == 0.0 => sign * f32::INFINITY,
        0x1f => f32::NAN,
        e => sign * (1.0 + man / 1024.0) * 2f32.powi(e - 15),
    }
}

/// f32 to IEEE half, round to nearest even (as the CPU's conversion ggml uses).
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rem > half || (rem == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && r & 1 == 1) {
        r += 1; // a carry into the exponent is the right rounding
    }
    sign | r as u16
}

fn half(b: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// One Q4_1 block (20 bytes) to 32 floats.
pub fn dequantize_q4_1(block: &[u8]) -> [f32; 32] {
    let (d, m) = (half(&block[0..2]), half(&block[2..4]));
    let mut x = [0f32; 32];
    for j in 0..16 {
        let q = block[4 + j];
        x[j] = f32::from(q & 0x0f) * d + m;
        x[j + 16] = f32::from(q >> 4) * d + m;
    }
    x
}

/// 32 floats to one Q8_0 block (34 bytes).
pub fn quantize_q8_0(x: &[f32; 32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// 32 floats to one Q4_0 block (18 bytes).
pub fn quantize_q4_0(x: &[f32; 32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

/// llama.cpp's `general.file_type` for a file mostly of `t`.
fn file_type(t: GgmlType) -> u32 {
    match t {
        GgmlType::Q4_0 => 2,
        GgmlType::Q8_0 => 7,
        other => panic!("requantize writes Q8_0 or Q4_0, not {other}"),
    }
}

/// Write `src` (a GGUF with Q4_1 tensors) to `dst` with every Q4_1 tensor as `to` (Q8_0 or
/// Q4_0) and `general.file_type` to match; `overrides` replace (or add) metadata values.
pub fn requantize(src: &Path, dst: &Path, to: GgmlType, overrides: &[(&str, GgufValue)]) {
    let g = gguf::read(src).unwrap();
    let bytes = std::fs::read(src).unwrap();
    let mut metadata = g.metadata.clone();
    let mut set = |k: &str, v: GgufValue| match metadata.iter_mut().find(|(name, _)| name == k) {
        Some(slot) => slot.1 = v,
        None => metadata.push((k.to_string(), v)),
    };
    set("general.file_type", GgufValue::U32(file_type(to)));
    for (k, v) in overrides {
        set(k, v.clone());
    }
    let specs: Vec<TensorSpec> = g
        .tensors
        .iter()
        .map(|t| TensorSpec {
            ggml_type: if t.ggml_type == GgmlType::Q4_1 {
                to
            } else {
                t.ggml_type
            },
            ..t.spec()
        })
        .collect();
    let mut w = std::io::BufWriter::new(std::fs::File::create(dst).unwrap());
    gguf::write_gguf(&mut w, &metadata, &specs, g.alignment, |i, _, out| {
        let t = &g.tensors[i];
        let start = (g.data_offset + t.offset) as usize;
        let data = &bytes[start..start + t.n_bytes as usize];
        if t.ggml_type != GgmlType::Q4_1 {
            return out.write_all(data);
        }
        let mut q = Vec::with_capacity(data.len() * 2);
        for block in data.chunks_exact(20) {
            let x = dequantize_q4_1(block);
            match to {
                GgmlType::Q8_0 => quantize_q8_0(&x, &mut q),
                _ => quantize_q4_0(&x, &mut q),
            }
        }
        out.write_all(&q)
    })
    .unwrap();
    w.flush().unwrap();
}
