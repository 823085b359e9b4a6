//! The GGUF reader and writer against each other.

use super::*;

fn sample() -> (Vec<(String, GgufValue)>, Vec<TensorSpec>) {
    let md = vec![
        (
            "general.architecture".to_string(),
            GgufValue::String("llama".into()),
        ),
        ("a.u8".into(), GgufValue::U8(7)),
        ("a.i8".into(), GgufValue::I8(-7)),
        ("a.u16".into(), GgufValue::U16(700)),
        ("a.i16".into(), GgufValue::I16(-700)),
        ("a.u32".into(), GgufValue::U32(70000)),
        ("a.i32".into(), GgufValue::I32(-70000)),
        ("a.f32".into(), GgufValue::F32(1.5)),
        ("a.bool".into(), GgufValue::Bool(true)),
        ("a.u64".into(), GgufValue::U64(1 << 40)),
        ("a.i64".into(), GgufValue::I64(-(1 << 40))),
        ("a.f64".into(), GgufValue::F64(-2.25)),
        (
            "a.arr".into(),
            GgufValue::Array(vtype::STRING, vec![GgufValue::String("x".into()); 3]),
        ),
        (
            "a.nested".into(),
            GgufValue::Array(
                vtype::ARRAY,
                vec![GgufValue::Array(
                    vtype::I32,
                    vec![GgufValue::I32(1), GgufValue::I32(2)],
                )],
            ),
        ),
    ];
    let ts = vec![
        TensorSpec {
            name: "a".into(),
            dims: vec![3],
            ggml_type: GgmlType::F32,
        },
        TensorSpec {
            name: "b".into(),
            dims: vec![256, 2],
            ggml_type: GgmlType::Q4_K,
        },
    ];
    (md, ts)
}

fn write_sample(path: &Path, align: u64) -> u64 {
    let (md, ts) = sample();
    let mut f = std::fs::File::create(path).unwrap();
    write_gguf(&mut f, &md, &ts, align, |_, t, w| {
        w.write_all(&vec![1u8; t.bytes().unwrap() as usize])
    })
    .unwrap()
}

#[test]
fn round_trip_every_value_type() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    let n = write_sample(&p, 32);
    let g = read(&p).unwrap();
    assert_eq!(g.file_len, n);
    let (md, _) = sample();
    assert_eq!(g.metadata, md);
    assert_eq!(g.tensors.len(), 2);
    assert_eq!(g.tensors[0].n_bytes, 12);
    assert_eq!(g.tensors[1].offset, 32);
    assert_eq!(g.tensors[1].n_bytes, 288);
    assert_eq!(g.data_offset % 32, 0);
    assert_eq!(g.get_u64("a.u16"), Some(700));
    assert_eq!(g.get_u64("a.i32"), None);
    assert_eq!(g.array_len("a.arr"), Some(3));
}

#[test]
fn errors_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    let n = write_sample(&p, 32);
    assert!(matches!(
        read(&dir.path().join("nope")),
        Err(GgufError::NotFound(_))
    ));
    assert!(matches!(read(dir.path()), Err(GgufError::IsDirectory(_))));
    let bytes = std::fs::read(&p).unwrap();
    // Truncated data section and truncated header.
    std::fs::write(&p, &bytes[..n as usize - 10]).unwrap();
    let e = read(&p).unwrap_err();
    assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
    std::fs::write(&p, &bytes[..40]).unwrap();
    assert!(matches!(read(&p), Err(GgufError::Truncated { .. })));
    // Bad magic.
    std::fs::write(&p, b"hello world, not a model").unwrap();
    assert!(matches!(read(&p), Err(GgufError::BadMagic { .. })));
    // Version 1.
    let mut v1 = bytes.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&p, &v1).unwrap();
    assert!(matches!(
        read(&p),
        Err(GgufError::UnsupportedVersion { version: 1, .. })
    ));
    // Unknown tensor type: patch the type id of tensor "a" (F32=0) to 200.
    let (hdr, _) = encode_header(&sample().0, &sample().1, 32).unwrap();
    let needle = {
        let mut v = Vec::new();
        put_str(&mut v, "a");
        v.extend_from_slice(&1u32.to_le_bytes());
        v.extend_from_slice(&3u64.to_le_bytes());
        v
    };
    let at = hdr.windows(needle.len()).position(|w| w == needle).unwrap() + needle.len();
    let mut bad = bytes.clone();
    bad[at..at + 4].copy_from_slice(&200u32.to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    let e = read(&p).unwrap_err();
    assert!(
        matches!(e, GgufError::UnknownTensorType { type_id: 200, .. }),
        "{e}"
    );
    assert_eq!(e.to_string().lines().count(), 1);
}

#[test]
fn custom_alignment_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    let (mut md, ts) = sample();
    md.push(("general.alignment".into(), GgufValue::U32(64)));
    let mut f = std::fs::File::create(&p).unwrap();
    write_gguf(&mut f, &md, &ts, 64, |_, t, w| {
        w.write_all(&vec![0u8; t.bytes().unwrap() as usize])
    })
    .unwrap();
    let g = read(&p).unwrap();
    assert_eq!(g.alignment, 64);
    assert_eq!(g.data_offset % 64, 0);
    assert_eq!(g.tensors[1].offset, 64);
}

#[test]
fn a_header_only_read_takes_a_file_cut_after_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    let n = write_sample(&p, 32);
    let whole = read(&p).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..whole.data_offset as usize + 5]).unwrap();
    // Whole: truncated, as before; header only: the whole file's header and length.
    assert!(matches!(read(&p), Err(GgufError::Truncated { .. })));
    let g = read_with(&p, Extent::HeaderOnly).unwrap();
    assert_eq!(g.file_len, n);
    assert_eq!((g.metadata, g.tensors), (whole.metadata, whole.tensors));
    // Cut inside the header: truncated either way.
    std::fs::write(&p, &bytes[..40]).unwrap();
    assert!(matches!(
        read_with(&p, Extent::HeaderOnly),
        Err(GgufError::Truncated { .. })
    ));
    // An offset past what the tensor infos describe, its data absent: corrupt, not a huge file.
    let (hdr, _) = encode_header(&sample().0, &sample().1, 32).unwrap();
    let mut cut = hdr.clone();
    // Tensor "b"'s offset (32) ends its info: its low byte is the header's last non-zero one.
    let needle = 32u64.to_le_bytes();
    let at = hdr.iter().rposition(|&b| b != 0).unwrap();
    assert_eq!(cut[at..at + 8], needle);
    cut[at..at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    std::fs::write(&p, &cut).unwrap();
    let e = read_with(&p, Extent::HeaderOnly).unwrap_err();
    assert!(matches!(e, GgufError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("'b'"), "{e}");
}
