//! ggml tensor types: ids (ggml.h `enum ggml_type`) and exact block sizes / bytes per block
//! (ggml.c `type_traits`, block structs in ggml-common.h) of the pinned llama.cpp.

use serde::{Deserialize, Serialize};

/// A ggml tensor element type that can appear in a GGUF file.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// (type, ggml id, name, values per block, bytes per block).
const TABLE: &[(GgmlType, u32, &str, u64, u64)] = &[
    (GgmlType::F32, 0, "F32", 1, 4),
    (GgmlType::F16, 1, "F16", 1, 2),
    (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
    (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
    (GgmlType::Q5_0, 6, "Q5_0", 32, 22),
    (GgmlType::Q5_1, 7, "Q5_1", 32, 24),
    (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
    (GgmlType::Q8_1, 9, "Q8_1", 32, 36),
    (GgmlType::Q2_K, 10, "Q2_K", 256, 84),
    (GgmlType::Q3_K, 11, "Q3_K", 256, 110),
    (GgmlType::Q4_K, 12, "Q4_K", 256, 144),
    (GgmlType::Q5_K, 13, "Q5_K", 256, 176),
    (GgmlType::Q6_K, 14, "Q6_K", 256, 210),
    (GgmlType::Q8_K, 15, "Q8_K", 256, 292),
    (GgmlType::IQ2_XXS, 16, "IQ2_XXS", 256, 66),
    (GgmlType::IQ2_XS, 17, "IQ2_XS", 256, 74),
    (GgmlType::IQ3_XXS, 18, "IQ3_XXS", 256, 98),
    (GgmlType::IQ1_S, 19, "IQ1_S", 256, 50),
    (GgmlType::IQ4_NL, 20, "IQ4_NL", 32, 18),
    (GgmlType::IQ3_S, 21, "IQ3_S", 256, 110),
    (GgmlType::IQ2_S, 22, "IQ2_S", 256, 82),
    (GgmlType::IQ4_XS, 23, "IQ4_XS", 256, 136),
    (GgmlType::I8, 24, "I8", 1, 1),
    (GgmlType::I16, 25, "I16", 1, 2),
    (GgmlType::I32, 26, "I32", 1, 4),
    (GgmlType::I64, 27, "I64", 1, 8),
    (GgmlType::F64, 28, "F64", 1, 8),
    (GgmlType::IQ1_M, 29, "IQ1_M", 256, 56),
    (GgmlType::BF16, 30, "BF16", 1, 2),
    (GgmlType::TQ1_0, 34, "TQ1_0", 256, 54),
    (GgmlType::TQ2_0, 35, "TQ2_0", 256, 66),
    (GgmlType::MXFP4, 39, "MXFP4", 32, 17),
    (GgmlType::NVFP4, 40, "NVFP4", 64, 36),
    (GgmlType::Q1_0, 41, "Q1_0", 128, 18),
    (GgmlType::Q2_0, 42, "Q2_0", 64, 18),
];

impl GgmlType {
    fn row(self) -> &'static (GgmlType, u32, &'static str, u64, u64) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every GgmlType has a table row")
    }

    /// Every known type, in ggml id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|r| r.0)
    }

    /// The type for a ggml id, `None` for ids this build does not know (or removed ones).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// The ggml id written in GGUF tensor infos.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Upper-case name as llama.cpp prints it in summaries (`Q4_K`, `F32`, `IQ2_XXS`).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Parse a name case-insensitively (`q4_k`, `Q8_0`, `bf16`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|r| r.2.eq_ignore_ascii_case(name))
            .map(|r| r.0)
    }

    /// Values per block.
    pub fn block_size(self) -> u64 {
        self.row().3
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.row().4
    }

    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of one row of `ne0` values; `None` when `ne0` is not a multiple of the block size.
    pub fn row_bytes(self, ne0: u64) -> Option<u64> {
        if ne0 % self.block_size() != 0 {
            return None;
        }
        (ne0 / self.block_size()).checked_mul(self.type_size())
    }

    /// Bytes of a tensor of shape `dims` (ne0 first); `None` when ne0 does not fit the blocks
    /// or the size overflows.
    pub fn tensor_bytes(self, dims: &[u64]) -> Option<u64> {
        let ne0 = dims.first().copied().unwrap_or(1);
        let mut n = self.row_bytes(ne0)?;
        for &d in dims.iter().skip(1) {
            n = n.checked_mul(d)?;
        }
        Some(n)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_sizes_match_ggml() {
        assert_eq!(GgmlType::from_id(12), Some(GgmlType::Q4_K));
        assert_eq!(GgmlType::Q4_K.type_size(), 144);
        assert_eq!(GgmlType::Q6_K.type_size(), 210);
        assert_eq!(GgmlType::from_id(39), Some(GgmlType::MXFP4));
        assert_eq!(GgmlType::from_id(4), None); // Q4_2, removed
        assert_eq!(GgmlType::from_id(31), None); // Q4_0_4_4, removed
        assert_eq!(GgmlType::from_id(99), None);
        for t in GgmlType::all() {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(&t.name().to_lowercase()), Some(t));
        }
    }

    #[test]
    fn tensor_bytes_checks_block_multiples() {
        assert_eq!(
            GgmlType::Q4_K.tensor_bytes(&[2048, 512]),
            Some(8 * 144 * 512)
        );
        assert_eq!(GgmlType::Q4_K.tensor_bytes(&[100, 2]), None);
        assert_eq!(GgmlType::F32.tensor_bytes(&[7]), Some(28));
        assert_eq!(GgmlType::Q8_0.tensor_bytes(&[64, 3, 2]), Some(2 * 34 * 6));
    }
}
