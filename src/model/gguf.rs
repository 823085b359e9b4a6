//! GGUF reading (header only: metadata and tensor infos) and writing.
//!
//! Format (little-endian): magic `GGUF`, u32 version (2 or 3), u64 tensor count, u64 metadata
//! count, metadata key/value pairs, tensor infos (name, n_dims, dims, ggml type, offset), padding
//! to `general.alignment` (default 32), then tensor data. Offsets are relative to the data start.
//!
//! Over 600 lines on purpose: one job, the GGUF format; the reader and the writer share the
//! value-type tables and the alignment rules and are tested against each other (gguf/tests.rs).

use super::ggml_type::GgmlType;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Why a file could not be read as a GGUF model. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("model file not found: {0} (check the path)")]
    NotFound(PathBuf),
    #[error("{0} is a directory, not a GGUF file (pass the .gguf file inside it)")]
    IsDirectory(PathBuf),
    #[error("{0} is not a regular file (a pipe, device or socket): pass the .gguf file itself")]
    NotRegular(PathBuf),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a GGUF file ({found}, expected \"GGUF\"); pass a .gguf model")]
    BadMagic { path: PathBuf, found: String },
    #[error("{path} is truncated: {what} (re-download or re-create the file)")]
    Truncated { path: PathBuf, what: String },
    #[error("{path} has GGUF version {version}, qtune reads versions 2 and 3 (re-convert with a current llama.cpp)")]
    UnsupportedVersion { path: PathBuf, version: u32 },
    #[error("{path}: tensor '{tensor}' has unknown ggml type id {type_id} (file from a newer llama.cpp than qtune knows?)")]
    UnknownTensorType {
        path: PathBuf,
        tensor: String,
        type_id: u32,
    },
    #[error("{path} is corrupt: {what}")]
    Corrupt { path: PathBuf, what: String },
}

/// A metadata value of any GGUF type.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Element type id (GGUF type) and the values.
    Array(u32, Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

pub mod vtype {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

impl GgufValue {
    /// The GGUF value type id.
    pub fn type_id(&self) -> u32 {
        match self {
            GgufValue::U8(_) => vtype::U8,
            GgufValue::I8(_) => vtype::I8,
            GgufValue::U16(_) => vtype::U16,
            GgufValue::I16(_) => vtype::I16,
            GgufValue::U32(_) => vtype::U32,
            GgufValue::I32(_) => vtype::I32,
            GgufValue::F32(_) => vtype::F32,
            GgufValue::Bool(_) => vtype::BOOL,
            GgufValue::String(_) => vtype::STRING,
            GgufValue::Array(..) => vtype::ARRAY,
            GgufValue::U64(_) => vtype::U64,
            GgufValue::I64(_) => vtype::I64,
            GgufValue::F64(_) => vtype::F64,
        }
    }

    /// Any integer (or bool) value as u64; negative values give `None`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v as u64),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::U16(v) => Some(v as u64),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::U32(v) => Some(v as u64),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::U64(v) => Some(v),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            GgufValue::Bool(b) => Some(b as u64),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(_, v) => Some(v),
            _ => None,
        }
    }
}

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Shape, ne0 first.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data relative to [`GgufFile::data_offset`].
    pub offset: u64,
    /// Bytes of the data.
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The tensor as [`write_gguf`] writes it again (its name, shape and type).
    pub fn spec(&self) -> TensorSpec {
        TensorSpec {
            name: self.name.clone(),
            dims: self.dims.clone(),
            ggml_type: self.ggml_type,
        }
    }
}

/// A GGUF file's header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the tensor data section.
    pub data_offset: u64,
    /// The file's length; read with [`Extent::HeaderOnly`] from a file cut short, the length
    /// its tensor infos give the whole file.
    pub file_len: u64,
}

impl GgufFile {
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| v.as_u64())
    }
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(|v| v.as_f64())
    }
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| v.as_str())
    }
    /// Length of an array value.
    pub fn array_len(&self, key: &str) -> Option<usize> {
        self.get(key).and_then(|v| v.as_array()).map(|a| a.len())
    }
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// Sum of all tensor bytes.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }
}

/// Text from a model file made fit for a one-line message: control characters (line breaks,
/// terminal escapes) as spaces, at most `max` characters.
pub fn shown(text: &str, max: usize) -> String {
    let line = crate::escape::one_line(text);
    if line.chars().count() <= max {
        line
    } else {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}...")
    }
}

/// How much of a GGUF file must be there for it to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// The header and every tensor's data: what a server loads (every command but `plan`).
    Whole,
    /// The header alone (metadata and tensor infos), the data may be cut off or absent:
    /// [`GgufFile::file_len`] is then the length the tensor infos say the whole file has.
    HeaderOnly,
}

/// Reads the header of a GGUF file and checks the file is long enough for every tensor.
pub fn read(path: &Path) -> Result<GgufFile, GgufError> {
    read_with(path, Extent::Whole)
}

/// Parses a GGUF header from the first bytes of a file held in memory (`name` for messages).
pub fn parse_bytes(bytes: &[u8], name: &Path, extent: Extent) -> Result<GgufFile, GgufError> {
    let mut r = Reader {
        inner: bytes,
        pos: 0,
        len: bytes.len() as u64,
        path: name.to_path_buf(),
        elements: 0,
    };
    r.parse(extent)
}

/// [`read`], asking for the whole file or its header only.
pub fn read_with(path: &Path, extent: Extent) -> Result<GgufFile, GgufError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(GgufError::NotFound(path.to_path_buf()))
        }
        Err(e) => {
            return Err(GgufError::Io {
                path: path.to_path_buf(),
                source: e,
            })
        }
    };
    if meta.is_dir() {
        return Err(GgufError::IsDirectory(path.to_path_buf()));
    }
    let file = match crate::util::open_regular(path) {
        Ok((f, _)) => f,
        Err(crate::util::BoundedReadError::NotRegular) => {
            return Err(GgufError::NotRegular(path.to_path_buf()))
        }
        Err(crate::util::BoundedReadError::Directory) => {
            return Err(GgufError::IsDirectory(path.to_path_buf()))
        }
        Err(crate::util::BoundedReadError::Io(e)) => {
            return Err(GgufError::Io {
                path: path.to_path_buf(),
                source: e,
            })
        }
        Err(e @ crate::util::BoundedReadError::TooLarge { .. }) => {
            return Err(GgufError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })
        }
    };
    let mut r = Reader {
        inner: BufReader::with_capacity(1 << 20, file),
        pos: 0,
        len: meta.len(),
        path: path.to_path_buf(),
        elements: 0,
    };
    r.parse(extent)
}

struct Reader<R: Read> {
    inner: R,
    pos: u64,
    len: u64,
    path: PathBuf,
    /// Metadata array elements read so far (see [`MAX_ELEMENTS`]).
    elements: u64,
}

/// The most weight bytes a header may claim: 1 PiB, about a thousand times the largest
/// published model's.
pub const MAX_MODEL_BYTES: u64 = 1 << 50;

/// The most bytes a GGUF header (metadata and tensor infos) may take: far above a real
/// model's (a 250k-token vocabulary and a thousand tensor infos take under 16 MiB).
pub const MAX_HEADER_BYTES: u64 = 64 << 20;

/// The most metadata array elements a header may hold, all arrays together: 16 times a
/// 256k-token vocabulary's tokens, scores, types and merges.
const MAX_ELEMENTS: u64 = 1 << 24;

/// Deepest nesting of arrays accepted (GGUF writers emit at most arrays of arrays).
const MAX_ARRAY_DEPTH: u32 = 4;

impl<R: Read> Reader<R> {
    fn truncated(&self, what: impl Into<String>) -> GgufError {
        GgufError::Truncated {
            path: self.path.clone(),
            what: shown(&what.into(), 300),
        }
    }

    fn corrupt(&self, what: impl Into<String>) -> GgufError {
        GgufError::Corrupt {
            path: self.path.clone(),
            what: shown(&what.into(), 300),
        }
    }

    /// A header past [`MAX_HEADER_BYTES`] is refused before it is read (a sparse file of
    /// exabytes could otherwise claim a string or an array as large and have it allocated).
    fn within_header(&self, n: u64, what: &str) -> Result<(), GgufError> {
        if self.pos.saturating_add(n) > MAX_HEADER_BYTES {
            return Err(self.corrupt(format!(
                "its header goes on past {} MiB while reading {what}, more than any model's",
                MAX_HEADER_BYTES >> 20
            )));
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        self.within_header(N as u64, what)?;
        let mut b = [0u8; N];
        match self.inner.read_exact(&mut b) {
            Ok(()) => {
                self.pos += N as u64;
                Ok(b)
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(self.truncated(
                format!("header ends at byte {} while reading {what}", self.len),
            )),
            Err(e) => Err(GgufError::Io {
                path: self.path.clone(),
                source: e,
            }),
        }
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes::<4>(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes::<8>(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let n = self.u64(what)?;
        if n > self.len.saturating_sub(self.pos) {
            return Err(self.truncated(format!(
                "{what} claims {n} bytes but the file has {} left",
                self.len.saturating_sub(self.pos)
            )));
        }
        self.within_header(n, what)?;
        let mut buf = vec![0u8; n as usize];
        match self.inner.read_exact(&mut buf) {
            Ok(()) => self.pos += n,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(self.truncated(format!("header ends while reading {what}")))
            }
            Err(e) => {
                return Err(GgufError::Io {
                    path: self.path.clone(),
                    source: e,
                })
            }
        }
        // Tokenizer strings may hold invalid UTF-8 in odd vocabularies: keep them lossy.
        Ok(match String::from_utf8(buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<GgufValue, GgufError> {
        Ok(match ty {
            vtype::U8 => GgufValue::U8(self.bytes::<1>(key)?[0]),
            vtype::I8 => GgufValue::I8(self.bytes::<1>(key)?[0] as i8),
            vtype::U16 => GgufValue::U16(u16::from_le_bytes(self.bytes::<2>(key)?)),
            vtype::I16 => GgufValue::I16(i16::from_le_bytes(self.bytes::<2>(key)?)),
            vtype::U32 => GgufValue::U32(self.u32(key)?),
            vtype::I32 => GgufValue::I32(self.u32(key)? as i32),
            vtype::F32 => GgufValue::F32(f32::from_le_bytes(self.bytes::<4>(key)?)),
            vtype::BOOL => GgufValue::Bool(self.bytes::<1>(key)?[0] != 0),
            vtype::STRING => GgufValue::String(self.string(key)?),
            vtype::U64 => GgufValue::U64(self.u64(key)?),
            vtype::I64 => GgufValue::I64(self.u64(key)? as i64),
            vtype::F64 => GgufValue::F64(f64::from_le_bytes(self.bytes::<8>(key)?)),
            vtype::ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.corrupt(format!("metadata '{key}' nests arrays too deeply")));
                }
                let et = self.u32(key)?;
                let n = self.u64(key)?;
                // Every element takes at least one byte: a count beyond the file is a lie.
                if n > self.len.saturating_sub(self.pos) {
                    return Err(self.truncated(format!(
                        "metadata array '{key}' claims {n} elements, more than the file holds"
                    )));
                }
                // Each element is at least one byte of the header, and 32 in memory: a
                // budget keeps a header of one-byte elements from taking gigabytes.
                self.elements = self.elements.saturating_add(n);
                if self.elements > MAX_ELEMENTS {
                    return Err(self.corrupt(format!(
                        "its metadata arrays hold more than {MAX_ELEMENTS} elements (at '{key}'), \
                         more than any model's"
                    )));
                }
                let mut items = Vec::with_capacity(n.min(1 << 20) as usize);
                for _ in 0..n {
                    items.push(self.value(et, key, depth + 1)?);
                }
                GgufValue::Array(et, items)
            }
            other => {
                return Err(self.corrupt(format!("metadata '{key}' has unknown value type {other}")))
            }
        })
    }

    fn parse(&mut self, extent: Extent) -> Result<GgufFile, GgufError> {
        if self.len < 4 {
            return Err(GgufError::BadMagic {
                path: self.path.clone(),
                found: format!("only {} bytes", self.len),
            });
        }
        let magic = self.bytes::<4>("magic")?;
        if &magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic {
                path: self.path.clone(),
                found: format!("starts with {:?}", String::from_utf8_lossy(&magic)),
            });
        }
        let version = self.u32("version")?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion {
                path: self.path.clone(),
                version,
            });
        }
        let n_tensors = self.u64("tensor count")?;
        let n_kv = self.u64("metadata count")?;
        // A tensor info takes at least 24 bytes, a key/value at least 13.
        if n_tensors > self.len / 24 || n_kv > self.len / 13 {
            return Err(self.truncated(format!(
                "header claims {n_tensors} tensors and {n_kv} metadata entries, more than the file holds"
            )));
        }
        if n_tensors > MAX_HEADER_BYTES / 24 || n_kv > MAX_HEADER_BYTES / 13 {
            return Err(self.corrupt(format!(
                "header claims {n_tensors} tensors and {n_kv} metadata entries, more than a \
                 header of {} MiB holds, more than any model's",
                MAX_HEADER_BYTES >> 20
            )));
        }
        // Grown as entries are read: a count is a claim, not an allocation.
        let mut metadata = Vec::with_capacity(n_kv.min(4096) as usize);
        for i in 0..n_kv {
            let key = self.string(&format!("metadata key #{i}"))?;
            let ty = self.u32(&key)?;
            let v = self.value(ty, &key, 0)?;
            metadata.push((key, v));
        }
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, v)) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => a,
                Some(a) => {
                    return Err(
                        self.corrupt(format!("general.alignment is {a}, not a power of two"))
                    )
                }
                None => {
                    return Err(self.corrupt(
                        "general.alignment is not a whole number (a power of two was expected)"
                            .to_string(),
                    ))
                }
            },
        };
        let mut tensors = Vec::with_capacity(n_tensors.min(4096) as usize);
        for i in 0..n_tensors {
            let name = self.string(&format!("tensor name #{i}"))?;
            let n_dims = self.u32(&name)?;
            if n_dims == 0 || n_dims > 4 {
                return Err(self.corrupt(format!("tensor '{name}' has {n_dims} dimensions")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(self.u64(&name)?);
            }
            let type_id = self.u32(&name)?;
            let offset = self.u64(&name)?;
            let ggml_type =
                GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
                    path: self.path.clone(),
                    tensor: shown(&name, 120),
                    type_id,
                })?;
            let n_bytes = ggml_type.tensor_bytes(&dims).ok_or_else(|| {
                self.corrupt(format!(
                    "tensor '{name}' shape {dims:?} does not fit {ggml_type} blocks of {}",
                    ggml_type.block_size()
                ))
            })?;
            if offset % alignment != 0 {
                return Err(self.corrupt(format!(
                    "tensor '{name}' offset {offset} is not aligned to {alignment}"
                )));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
                n_bytes,
            });
        }
        // A hostile header's shapes must not add up past what any arithmetic on the model's
        // size can hold (a header read alone is not checked against the file's length).
        let total = tensors
            .iter()
            .try_fold(0u64, |sum, t| sum.checked_add(t.n_bytes))
            .filter(|&t| t <= MAX_MODEL_BYTES);
        if total.is_none() {
            return Err(self.corrupt(format!(
                "its {} tensors claim more than 1 PiB of weights, more than any model's",
                tensors.len()
            )));
        }
        let data_offset = if tensors.is_empty() {
            self.pos
        } else {
            self.pos.div_ceil(alignment) * alignment
        };
        let need = tensors
            .iter()
            // Saturating: a hostile header's offsets must not wrap past the file's end.
            .map(|t| {
                data_offset
                    .saturating_add(t.offset)
                    .saturating_add(t.n_bytes)
            })
            .max()
            .unwrap_or(data_offset);
        if need > self.len && extent == Extent::HeaderOnly {
            // The data is not there to check the offsets against: a writer packs the tensors
            // in order, each padded to the alignment, so their end lies within that size.
            let packed = tensors.iter().fold(data_offset, |sum, t| {
                sum.saturating_add(t.n_bytes.div_ceil(alignment).saturating_mul(alignment))
            });
            if need > packed {
                let t = tensors
                    .iter()
                    .max_by_key(|t| t.offset.saturating_add(t.n_bytes))
                    .map(|t| t.name.clone())
                    .unwrap_or_default();
                return Err(self.corrupt(format!(
                    "tensor '{t}' ends past the {packed} bytes its tensor infos describe (the \
                     header is corrupt)"
                )));
            }
        }
        if need > self.len && extent == Extent::Whole {
            let t = tensors
                .iter()
                .find(|t| {
                    data_offset
                        .saturating_add(t.offset)
                        .saturating_add(t.n_bytes)
                        > self.len
                })
                .map(|t| t.name.clone())
                .unwrap_or_default();
            return Err(self.truncated(format!(
                "{} bytes, but its tensors need {need} (tensor '{t}' is cut off)",
                self.len
            )));
        }
        Ok(GgufFile {
            path: self.path.clone(),
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            file_len: self.len.max(need),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(*x as u8),
        GgufValue::String(s) => put_str(out, s),
        GgufValue::Array(et, items) => {
            out.extend_from_slice(&et.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                put_value(out, it);
            }
        }
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// A tensor to write: name, shape (ne0 first), type.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
}

impl TensorSpec {
    pub fn bytes(&self) -> Option<u64> {
        self.ggml_type.tensor_bytes(&self.dims)
    }
}

/// Serializes a GGUF v3 header (metadata, tensor infos, padding) and returns it with the
/// data offset of each tensor. The data section follows, each tensor padded to `alignment`.
pub fn encode_header(
    metadata: &[(String, GgufValue)],
    tensors: &[TensorSpec],
    alignment: u64,
) -> anyhow::Result<(Vec<u8>, Vec<u64>)> {
    let mut out = Vec::new();
    out.extend_from_slice(GGUF_MAGIC);
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_str(&mut out, k);
        out.extend_from_slice(&v.type_id().to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut off = 0u64;
    for t in tensors {
        let n = t.bytes().ok_or_else(|| {
            anyhow::anyhow!(
                "tensor '{}' shape {:?} does not fit {} blocks",
                t.name,
                t.dims,
                t.ggml_type
            )
        })?;
        put_str(&mut out, &t.name);
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ggml_type.id().to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
        offsets.push(off);
        off = (off + n).div_ceil(alignment) * alignment;
    }
    let pad = (out.len() as u64).div_ceil(alignment) * alignment - out.len() as u64;
    out.extend(std::iter::repeat_n(0u8, pad as usize));
    Ok((out, offsets))
}

/// Writes a whole GGUF file to `w`: header, then each tensor's bytes from `fill` (called with
/// the tensor index, its spec and a buffer of exactly its size to fill), padded to alignment.
/// Returns the bytes written.
pub fn write_gguf<W: Write>(
    w: &mut W,
    metadata: &[(String, GgufValue)],
    tensors: &[TensorSpec],
    alignment: u64,
    mut fill: impl FnMut(usize, &TensorSpec, &mut dyn Write) -> std::io::Result<()>,
) -> anyhow::Result<u64> {
    let (header, _) = encode_header(metadata, tensors, alignment)?;
    w.write_all(&header)?;
    let mut written = header.len() as u64;
    let zeros = vec![0u8; alignment as usize];
    for (i, t) in tensors.iter().enumerate() {
        let n = t.bytes().unwrap_or(0);
        let mut counting = CountingWriter {
            inner: &mut *w,
            n: 0,
        };
        fill(i, t, &mut counting)?;
        if counting.n != n {
            anyhow::bail!(
                "internal error: tensor '{}' wrote {} bytes, expected {n}",
                t.name,
                counting.n
            );
        }
        written += n;
        let pad = written.div_ceil(alignment) * alignment - written;
        w.write_all(&zeros[..pad as usize])?;
        written += pad;
    }
    Ok(written)
}

struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests;
