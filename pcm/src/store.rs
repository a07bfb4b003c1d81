//! Named, typed state: what a departing process stores and its replacement loads.
//!
//! Two kinds of entry:
//! - **values**: any serde type, encoded with CBOR (counters, parameters, small structs);
//! - **arrays**: slices of plain numeric data (`bytemuck::Pod`), kept as raw bytes so that a
//!   gigabyte of `f64` is moved with one `memcpy` on each side and no encoding.
//!
//! Each entry remembers the Rust type it was stored as, so that loading it as another type
//! is an error naming both, never a silent reinterpretation.
//!
//! Bytes are held in `u64` words: the buffer is 8-byte aligned, so an array of `f64`, `u64`
//! or `i64` received from the network becomes the caller's `Vec<T>` without a copy.

use std::collections::BTreeMap;
use std::time::Instant;

use bytemuck::Pod;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::PcmError;
use crate::shared::{Segment, SharedArray};

/// Longest state name accepted.
const MAX_NAME_LEN: usize = 255;

/// Bytes in 8-byte-aligned storage.
#[derive(Debug, Default)]
pub(crate) struct Blob {
    words: Vec<u64>,
    len: usize,
}

impl Blob {
    /// A zeroed blob of `len` bytes (fresh pages from the allocator: no explicit zeroing),
    /// backed by huge pages when large, since it is about to be filled in one pass.
    pub(crate) fn zeroed(len: usize) -> Self {
        let mut words = vec![0u64; len.div_ceil(8)];
        crate::ffi::advise_huge_pages(&mut words);
        Blob { words, len }
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Self {
        let mut blob = Blob::zeroed(bytes.len());
        blob.bytes_mut().copy_from_slice(bytes);
        blob
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    /// The storage words, for sending over MPI (the padding after `len` is zero).
    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    pub(crate) fn words_mut(&mut self) -> &mut [u64] {
        &mut self.words
    }

    /// Turns the bytes into a `Vec<T>`, without copying when `T` has the alignment of `u64`.
    fn into_vec<T: Pod>(self) -> Vec<T> {
        let elem = std::mem::size_of::<T>();
        let count = self.len.checked_div(elem).unwrap_or(0);
        if std::mem::align_of::<T>() == std::mem::align_of::<u64>()
            && elem != 0
            && self.len % 8 == 0
        {
            let len = self.len;
            match bytemuck::allocation::try_cast_vec::<u64, T>(self.words) {
                Ok(mut v) => {
                    v.truncate(len / elem);
                    return v;
                }
                Err((_, words)) => {
                    return Blob { words, len }.copy_into_vec(count);
                }
            }
        }
        self.copy_into_vec(count)
    }

    fn copy_into_vec<T: Pod>(&self, count: usize) -> Vec<T> {
        let mut out = vec![T::zeroed(); count];
        bytemuck::cast_slice_mut::<T, u8>(&mut out)
            .copy_from_slice(&self.bytes()[..count * std::mem::size_of::<T>()]);
        out
    }
}

/// Whether an entry holds a serde value or a raw array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Kind {
    /// CBOR-encoded serde value.
    Value,
    /// Raw bytes of a `Pod` slice.
    Array,
}

/// Where an entry's bytes are.
#[derive(Debug)]
pub(crate) enum Data {
    /// In the store's own buffer (a copy made by `store_*`, or received over MPI).
    Blob(Blob),
    /// In a shared-memory segment: a read-only handle on a [`SharedArray`] stored with
    /// `store_shared` (no copy), or a segment taken over from a departing process on this
    /// host or received into a new one (which this process alone holds).
    Shared(Segment),
}

impl Data {
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::Blob(b) => b.len(),
            Data::Shared(s) => s.len(),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Data::Blob(b) => b.bytes(),
            Data::Shared(s) => s.bytes(),
        }
    }

    /// The bytes in 8-byte words, zero padding included, for sending over MPI.
    pub(crate) fn words(&self) -> &[u64] {
        match self {
            Data::Blob(b) => b.words(),
            Data::Shared(s) => s.words(),
        }
    }
}

/// One stored entry.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) kind: Kind,
    pub(crate) type_name: String,
    pub(crate) data: Data,
}

/// What is sent ahead of the bytes when state moves to a replacement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EntryHeader {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) type_name: String,
    pub(crate) len: u64,
}

/// The named state of one process.
#[derive(Debug, Default)]
pub(crate) struct Store {
    entries: BTreeMap<String, Entry>,
}

pub(crate) fn check_name(name: &str) -> Result<(), PcmError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(PcmError::InvalidName(name.chars().take(80).collect()));
    }
    if name == RESERVED_NAME {
        return Err(PcmError::Declaration(format!(
            "the state name {RESERVED_NAME:?} is PCM's own (a checkpoint's array declarations): choose another"
        )));
    }
    Ok(())
}

/// The name PCM keeps for itself in a store (see `handle::checkpoint::width`).
pub(crate) const RESERVED_NAME: &str = "pcm.blocks";

/// Target of the per-call timing lines of stores and loads.
pub(crate) const TIMING_TARGET: &str = "pcm::timing";

/// One event per store or load call ([`pcm_proto::run::RunEvent::Stored`], `Loaded`), so
/// that benchmarks (`mpi-ios-bench fig17`, the paper's Figure 18) can split a
/// reconfiguration's cost into checkpointing and loading without instrumenting the
/// application; and the same as a debug line for people (`RUST_LOG=pcm::timing=debug`).
fn log_timing(op: &str, name: &str, bytes: usize, started: Instant) {
    crate::events::store_call(op == "store", name, bytes, started);
    tracing::debug!(
        target: TIMING_TARGET,
        "{{\"event\":\"pcm_{op}\",\"name\":{name:?},\"bytes\":{bytes},\"us\":{}}}",
        started.elapsed().as_micros()
    );
}

pub(crate) fn type_label<T: ?Sized>() -> String {
    std::any::type_name::<T>().to_owned()
}

impl Store {
    pub(crate) fn store_value<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), PcmError> {
        check_name(name)?;
        let started = Instant::now();
        let mut bytes = Vec::new();
        ciborium::into_writer(value, &mut bytes).map_err(|e| PcmError::Codec {
            name: name.to_owned(),
            action: "encoded",
            reason: e.to_string(),
        })?;
        self.insert(
            name,
            Kind::Value,
            type_label::<T>(),
            Data::Blob(Blob::from_bytes(&bytes)),
        );
        log_timing("store", name, bytes.len(), started);
        Ok(())
    }

    pub(crate) fn store_array<T: Pod>(&mut self, name: &str, values: &[T]) -> Result<(), PcmError> {
        check_name(name)?;
        let started = Instant::now();
        let blob = Blob::from_bytes(bytemuck::cast_slice(values));
        let len = blob.len();
        self.insert(name, Kind::Array, type_label::<[T]>(), Data::Blob(blob));
        log_timing("store", name, len, started);
        Ok(())
    }

    /// Stores a shared array without copying it: the store keeps a read-only handle on
    /// its pages, which a replacement on the same host takes over.
    pub(crate) fn store_shared<T: Pod>(
        &mut self,
        name: &str,
        array: &SharedArray<T>,
    ) -> Result<(), PcmError> {
        check_name(name)?;
        let started = Instant::now();
        let segment = array.segment().share_read_only()?;
        let len = segment.len();
        self.insert(
            name,
            Kind::Array,
            type_label::<[T]>(),
            Data::Shared(segment),
        );
        log_timing("store", name, len, started);
        Ok(())
    }

    fn insert(&mut self, name: &str, kind: Kind, type_name: String, data: Data) {
        self.entries.insert(
            name.to_owned(),
            Entry {
                kind,
                type_name,
                data,
            },
        );
    }

    pub(crate) fn insert_entry(&mut self, name: String, entry: Entry) {
        self.entries.insert(name, entry);
    }

    fn get(&self, name: &str, kind: Kind, expected: String) -> Result<&Entry, PcmError> {
        let entry = self.entries.get(name).ok_or_else(|| PcmError::NotStored {
            name: name.to_owned(),
            available: self.entries.keys().cloned().collect(),
        })?;
        if entry.kind != kind || entry.type_name != expected {
            return Err(PcmError::WrongType {
                name: name.to_owned(),
                expected,
                found: entry.type_name.clone(),
            });
        }
        Ok(entry)
    }

    pub(crate) fn load_value<T: DeserializeOwned>(&self, name: &str) -> Result<T, PcmError> {
        let started = Instant::now();
        let entry = self.get(name, Kind::Value, type_label::<T>())?;
        let value = ciborium::from_reader(entry.data.bytes()).map_err(|e| PcmError::Codec {
            name: name.to_owned(),
            action: "decoded",
            reason: e.to_string(),
        })?;
        log_timing("load", name, entry.data.len(), started);
        Ok(value)
    }

    /// Removes the array stored under `name`, checked to be of element type `T`.
    fn remove_array<T: Pod>(&mut self, name: &str) -> Result<Entry, PcmError> {
        self.get(name, Kind::Array, type_label::<[T]>())?;
        self.entries
            .remove(name)
            .ok_or(PcmError::internal("entry vanished"))
    }

    /// Removes an array and returns it, without a copy for 8-byte element types.
    pub(crate) fn take_array<T: Pod>(&mut self, name: &str) -> Result<Vec<T>, PcmError> {
        let started = Instant::now();
        let entry = self.remove_array::<T>(name)?;
        let len = entry.data.len();
        let values = match entry.data {
            Data::Blob(blob) => blob.into_vec(),
            Data::Shared(segment) => {
                let count = len / std::mem::size_of::<T>().max(1);
                let mut out = vec![T::zeroed(); count];
                bytemuck::cast_slice_mut::<T, u8>(&mut out)
                    .copy_from_slice(&segment.bytes()[..count * std::mem::size_of::<T>()]);
                out
            }
        };
        log_timing("load", name, len, started);
        Ok(values)
    }

    /// Removes an array and returns it as a shared array of job `job`: without a copy when
    /// this process alone holds its segment (taken over from a departing process on this
    /// host, or received into one), as a new shared array holding a copy otherwise.
    pub(crate) fn take_shared<T: Pod>(
        &mut self,
        name: &str,
        job: &str,
    ) -> Result<SharedArray<T>, PcmError> {
        let started = Instant::now();
        let entry = self.remove_array::<T>(name)?;
        let len = entry.data.len();
        let array = match entry.data {
            Data::Shared(segment) if segment.is_held_alone() => {
                SharedArray::from_segment(name, segment)?
            }
            data => SharedArray::copy_of(job, name, data.bytes())?,
        };
        log_timing("load", name, len, started);
        Ok(array)
    }

    pub(crate) fn load_array_into<T: Pod>(
        &self,
        name: &str,
        out: &mut [T],
    ) -> Result<(), PcmError> {
        let started = Instant::now();
        let entry = self.get(name, Kind::Array, type_label::<[T]>())?;
        let found = entry.data.len() / std::mem::size_of::<T>().max(1);
        if found != out.len() {
            return Err(PcmError::WrongLength {
                name: name.to_owned(),
                expected: out.len(),
                found,
            });
        }
        bytemuck::cast_slice_mut::<T, u8>(out).copy_from_slice(entry.data.bytes());
        log_timing("load", name, entry.data.len(), started);
        Ok(())
    }

    /// Type label (`[f64]`, ...) and byte length of the array stored under `name`.
    pub(crate) fn array_layout(&self, name: &str) -> Result<(&str, usize), PcmError> {
        let entry = self.entries.get(name).ok_or_else(|| PcmError::NotStored {
            name: name.to_owned(),
            available: self.entries.keys().cloned().collect(),
        })?;
        if entry.kind != Kind::Array {
            return Err(PcmError::WrongType {
                name: name.to_owned(),
                expected: "an array".to_owned(),
                found: entry.type_name.clone(),
            });
        }
        Ok((&entry.type_name, entry.data.len()))
    }

    pub(crate) fn total_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.data.len() as u64).sum()
    }

    pub(crate) fn headers(&self) -> Vec<EntryHeader> {
        self.entries
            .iter()
            .map(|(name, e)| EntryHeader {
                name: name.clone(),
                kind: e.kind,
                type_name: e.type_name.clone(),
                len: e.data.len() as u64,
            })
            .collect()
    }

    /// The entry stored under `name`, if any.
    pub(crate) fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    /// Every entry with its name, in name order.
    pub(crate) fn named_entries(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries.iter()
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_type_is_checked() {
        let mut store = Store::default();
        store.store_value("iteration", &42u64).unwrap();
        store
            .store_value("params", &("heat".to_owned(), 0.25f64))
            .unwrap();
        assert_eq!(store.load_value::<u64>("iteration").unwrap(), 42);
        assert_eq!(
            store.load_value::<(String, f64)>("params").unwrap(),
            ("heat".to_owned(), 0.25)
        );
        let err = store.load_value::<i32>("iteration").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PcmError::WrongType { .. }));
        assert!(
            text.contains("\"iteration\"") && text.contains("u64") && text.contains("i32"),
            "{text}"
        );
    }

    #[test]
    fn missing_name_lists_what_is_stored() {
        let mut store = Store::default();
        store.store_value("a", &1u8).unwrap();
        let err = store.load_value::<u8>("b").unwrap_err();
        assert_eq!(err.to_string(), "no state stored under \"b\" (stored: a)");
        let empty = Store::default();
        assert!(empty
            .load_value::<u8>("b")
            .unwrap_err()
            .to_string()
            .contains("nothing is stored"));
    }

    #[test]
    fn arrays_round_trip_with_and_without_copy() {
        let mut store = Store::default();
        let grid: Vec<f64> = (0..1001).map(|i| i as f64 * 0.5).collect();
        let small: Vec<f32> = vec![1.5, -2.0, 3.25];
        let bytes: Vec<u8> = vec![1, 2, 3, 4, 5];
        store.store_array("grid", &grid).unwrap();
        store.store_array("small", &small).unwrap();
        store.store_array("bytes", &bytes).unwrap();
        let mut into = vec![0f32; 3];
        store.load_array_into("small", &mut into).unwrap();
        assert_eq!(into, small);
        assert!(matches!(
            store.load_array_into("small", &mut [0f32; 2]),
            Err(PcmError::WrongLength {
                expected: 2,
                found: 3,
                ..
            })
        ));
        assert!(matches!(
            store.take_array::<f32>("grid"),
            Err(PcmError::WrongType { .. })
        ));
        assert!(matches!(
            store.load_value::<Vec<f64>>("grid"),
            Err(PcmError::WrongType { .. })
        ));
        assert_eq!(store.take_array::<f64>("grid").unwrap(), grid);
        assert_eq!(store.take_array::<u8>("bytes").unwrap(), bytes);
    }

    #[test]
    fn the_reserved_name_is_refused_with_its_reason() {
        let mut s = Store::default();
        let e = s.store_value(RESERVED_NAME, &1u32).unwrap_err().to_string();
        assert!(e.contains("PCM's own"), "{e}");
        assert!(s.store_array(RESERVED_NAME, &[1.0f64]).is_err());
    }

    #[test]
    fn bad_names_are_refused() {
        let mut store = Store::default();
        assert!(matches!(
            store.store_value("", &1),
            Err(PcmError::InvalidName(_))
        ));
        assert!(store.store_value(&"x".repeat(256), &1).is_err());
    }
}
