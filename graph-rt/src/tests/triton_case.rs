//! One Triton launch to reproduce, and the checks the Triton tests run on it: a kernel's cache
//! files, its arguments (buffers at byte offsets, scalars with their Triton type) and the bytes of
//! every buffer before and after Triton's own launch. Cases come from the embedded fixtures
//! (triton-fixtures/, made by make.py) or from a folder made at run time by
//! scripts/inductor_cases.py (real torch.compile kernels); both write the same manifest.

use std::path::Path;

use serde_json::Value;

use crate::table::PtrSlot;
use crate::triton::{TritonArg, TritonFiles, TritonForm, TritonKernel};
use crate::{
    ArgTable, CaptureMode, Context, DeviceBuffer, DeviceView, Event, EventFlags, Stream,
    TableOptions,
};

macro_rules! triton_fixtures_dir {
    () => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../triton-fixtures/")
    };
}
include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../triton-fixtures/embed.rs"
));

/// What a check found wrong: a typed error of graph-rt's, or bytes unlike Triton's.
pub(super) type Outcome<T> = std::result::Result<T, String>;

/// One launch to reproduce.
pub(super) struct Case {
    pub name: String,
    pub files: TritonFiles,
    pub manifest: Value,
    pub buffers: Vec<u8>,
}

impl Case {
    pub fn fixture(fx: &TritonFixture) -> Self {
        Self {
            name: fx.name.into(),
            files: fx.files(),
            manifest: fx.manifest(),
            buffers: fx.buffers.to_vec(),
        }
    }

    /// Reads a case folder: manifest.json, buffers.bin and the kernel's files the manifest names.
    pub fn read(dir: &Path) -> Outcome<Self> {
        let read = |f: &str| std::fs::read(dir.join(f)).map_err(|e| format!("{f}: {e}"));
        let manifest: Value = serde_json::from_slice(&read("manifest.json")?)
            .map_err(|e| format!("manifest.json: {e}"))?;
        let kernel = manifest["kernel"].as_str().ok_or("manifest: no kernel")?;
        let files = TritonFiles::read(dir, kernel).map_err(|e| e.to_string())?;
        Ok(Self {
            name: dir.file_name().unwrap().to_string_lossy().into_owned(),
            files,
            buffers: read("buffers.bin")?,
            manifest,
        })
    }

    /// Whether Triton's two launches from the same inputs gave the same bytes (cases without
    /// the field, the fixtures, are).
    pub fn deterministic(&self) -> bool {
        self.manifest["deterministic"].as_bool().unwrap_or(true)
    }

    fn args(&self) -> &[Value] {
        self.manifest["args"].as_array().map_or(&[], Vec::as_slice)
    }

    pub fn grid(&self) -> [u32; 3] {
        let g: Vec<u32> = self.manifest["grid"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|v| v.as_u64().unwrap_or(1) as u32)
            .collect();
        [0, 1, 2].map(|i| g.get(i).copied().unwrap_or(1))
    }

    /// The buffers, in manifest order, filled with their bytes before Triton's launch (each
    /// at least 16 bytes, so that an empty storage still has an address).
    pub fn upload(&self, ctx: &Context) -> Outcome<Vec<(String, DeviceBuffer<u8>)>> {
        let bufs = self.manifest["buffers"].as_object().ok_or("no buffers")?;
        bufs.iter()
            .map(|(name, b)| {
                let (at, len) = span(b, "before");
                let mut bytes = self.buffers[at..at + len].to_vec();
                bytes.resize(len.max(16), 0);
                let buf = DeviceBuffer::from_host(ctx, &bytes).map_err(|e| e.to_string())?;
                Ok((name.clone(), buf))
            })
            .collect()
    }

    /// Every buffer holds the bytes it held after Triton's launch: exactly, or for a case whose
    /// two Triton launches differed, within a tolerance of the buffer's element type.
    pub fn check(&self, bufs: &[(String, DeviceBuffer<u8>)], what: &str) -> Outcome<()> {
        for (name, buf) in bufs {
            let b = &self.manifest["buffers"][name];
            let (at, len) = span(b, "after");
            let got = buf.to_vec().map_err(|e| e.to_string())?;
            let (got, want) = (&got[..len], &self.buffers[at..at + len]);
            if got == want {
                continue;
            }
            let dtype = b["dtype"].as_str().unwrap_or("uint8");
            if !self.deterministic() && close(got, want, dtype) {
                continue;
            }
            let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
            return Err(format!(
                "{} ({what}): buffer `{name}` ({dtype}, {len} bytes) differs from Triton's launch first at byte {first}",
                self.name
            ));
        }
        Ok(())
    }

    /// The launch's arguments over `views` (one per argument, `None` for scalars): pointer
    /// slots where the kernel reads one, else the view or the scalar.
    pub fn triton_args<'a>(
        &self,
        views: &'a [Option<DeviceView<u8>>],
        slots: &'a [Option<PtrSlot<u8>>],
    ) -> Outcome<Vec<TritonArg<'a>>> {
        self.args()
            .iter()
            .zip(views.iter().zip(slots))
            .map(|(a, (v, s))| match (s, v) {
                (Some(s), _) => Ok(TritonArg::ptr_slot(s)),
                (None, Some(v)) => Ok(TritonArg::view(v)),
                (None, None) => scalar(a),
            })
            .collect()
    }

    /// A view of each pointer argument's buffer at its offset (`None` for scalars).
    pub fn views(
        &self,
        bufs: &[(String, DeviceBuffer<u8>)],
    ) -> Outcome<Vec<Option<DeviceView<u8>>>> {
        self.args()
            .iter()
            .map(|a| {
                let Some(name) = a["buffer"].as_str() else {
                    return Ok(None);
                };
                let buf = &bufs
                    .iter()
                    .find(|(n, _)| n == name)
                    .ok_or("no such buffer")?
                    .1;
                let offset = a["offset"].as_u64().unwrap_or(0) as usize;
                buf.slice(offset..).map(Some).map_err(|e| e.to_string())
            })
            .collect()
    }

    fn slots(
        &self,
        kernel: &TritonKernel,
        table: &mut ArgTable,
    ) -> Outcome<Vec<Option<PtrSlot<u8>>>> {
        if kernel.params().len() != self.args().len() {
            return Err(format!(
                "{}: the kernel takes {} parameters, the case gives {}",
                self.name,
                kernel.params().len(),
                self.args().len()
            ));
        }
        kernel
            .params()
            .iter()
            .map(|p| {
                p.slot
                    .then(|| table.ptr_slot())
                    .transpose()
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    fn bind(
        table: &mut ArgTable,
        slots: &[Option<PtrSlot<u8>>],
        views: &[Option<DeviceView<u8>>],
    ) -> Outcome<()> {
        for (s, v) in slots.iter().zip(views) {
            if let (Some(s), Some(v)) = (s, v) {
                table.bind_view(s, v).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Launches `kernel` once on the case's inputs (pointer slots of a table refreshed first
    /// where the kernel is a table form) and checks the bytes.
    pub fn launch_once(
        &self,
        ctx: &Context,
        stream: &Stream,
        kernel: &TritonKernel,
        what: &str,
    ) -> Outcome<()> {
        let e = |e: crate::Error| e.to_string();
        let bufs = self.upload(ctx)?;
        let views = self.views(&bufs)?;
        let mut table = ArgTable::new(ctx, TableOptions::default()).map_err(e)?;
        let slots = self.slots(kernel, &mut table)?;
        Self::bind(&mut table, &slots, &views)?;
        let args = self.triton_args(&views, &slots)?;
        // SAFETY: the case's own buffers (whole storages) and arguments, as Triton launched them.
        unsafe {
            if slots.iter().any(Option::is_some) {
                table.refresh(stream).map_err(e)?;
                kernel
                    .launch_after_refresh(stream, self.grid(), &args)
                    .map_err(e)?;
            } else {
                kernel.launch(stream, self.grid(), &args).map_err(e)?;
            }
        }
        stream.synchronize().map_err(e)?;
        self.check(&bufs, what)
    }

    /// `replays` replays of a graph of the case's table form (refresh, kernel), every pointer
    /// slot bound to fresh buffers holding the inputs before each, no synchronization until the
    /// end; then every replay's buffers are checked. Returns the GPU µs of one replay.
    pub fn replay_rebound(
        &self,
        ctx: &Context,
        stream: &Stream,
        form: TritonForm,
        replays: usize,
    ) -> Outcome<f64> {
        let e = |e: crate::Error| e.to_string();
        let kernel = TritonKernel::load(ctx, &self.files, form).map_err(e)?;
        let mut table = ArgTable::new(ctx, TableOptions::default()).map_err(e)?;
        let slots = self.slots(&kernel, &mut table)?;
        if !slots.iter().any(Option::is_some) {
            return Err(format!(
                "{}: the table form reads no pointer from a slot",
                self.name
            ));
        }
        kernel.reserve_scratch(ctx, self.grid(), 1).map_err(e)?;
        let none: Vec<Option<DeviceView<u8>>> = self.args().iter().map(|_| None).collect();
        let exec = stream
            .capture(CaptureMode::Global, |scope| {
                table.record_refresh(scope)?;
                let args = self
                    .triton_args(&none, &slots)
                    .map_err(|r| crate::Error::invalid("case", r))?;
                // SAFETY: every slot is bound to a fresh copy of the case's buffers before each
                // launch.
                unsafe { kernel.record(scope, self.grid(), &args)? };
                Ok(())
            })
            .and_then(|g| g.instantiate())
            .map_err(e)?;
        let sets = (0..replays)
            .map(|_| {
                let bufs = self.upload(ctx)?;
                let views = self.views(&bufs)?;
                Ok((bufs, views))
            })
            .collect::<Outcome<Vec<_>>>()?;
        let (start, end) = (
            Event::new(ctx, EventFlags::Timing).map_err(e)?,
            Event::new(ctx, EventFlags::Timing).map_err(e)?,
        );
        start.record(stream).map_err(e)?;
        for (_, views) in &sets {
            Self::bind(&mut table, &slots, views)?;
            table.launch(&exec, stream).map_err(e)?;
        }
        end.record(stream).map_err(e)?;
        stream.synchronize().map_err(e)?;
        for (bufs, _) in &sets {
            self.check(bufs, "graph replay, rebound")?;
        }
        Ok(Event::elapsed_ms(&start, &end).map_err(e)? as f64 * 1e3 / replays as f64)
    }
}

/// A scalar argument of a manifest, as Triton's launcher passed it.
pub(super) fn scalar(arg: &Value) -> Outcome<TritonArg<'static>> {
    TritonFixture::try_scalar(arg)
        .ok_or_else(|| format!("scalar argument {arg} of a type or value the test cannot pass"))
}

/// Where a buffer's bytes `which` ("before" or "after") lie in buffers.bin.
fn span(b: &Value, which: &str) -> (usize, usize) {
    (
        b[which].as_u64().unwrap_or(0) as usize,
        b["bytes"].as_u64().unwrap_or(0) as usize,
    )
}

/// Equal within the tolerance of a sum made in another order: floats (of the buffer's dtype)
/// within 1e-3 of their own size plus 1e-4 of the buffer's largest; integers and others never.
fn close(got: &[u8], want: &[u8], dtype: &str) -> bool {
    let values = |b: &[u8]| -> Option<Vec<f64>> {
        let v = match dtype {
            "float32" => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                .collect(),
            "float64" => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            "float16" => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            "bfloat16" => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            _ => return None,
        };
        Some(v)
    };
    let (Some(g), Some(w)) = (values(got), values(want)) else {
        return false;
    };
    let largest = w.iter().fold(0f64, |m, x| m.max(x.abs()));
    g.iter().zip(&w).all(|(g, w)| {
        (g - w).abs() <= 1e-3 * w.abs() + 1e-4 * largest || (g.is_nan() && w.is_nan())
    })
}

#[test]
fn every_scalar_type_a_manifest_may_hold_is_passed() {
    // The scalar types of Triton's signatures that scripts/inductor_cases.py records.
    for (ty, value) in [
        ("i1", "true"),
        ("u1", "1"),
        ("i8", "-3"),
        ("u8", "200"),
        ("i16", "-300"),
        ("u16", "60000"),
        ("i32", "-70000"),
        ("u32", "4000000000"),
        ("i64", "-5000000000"),
        ("u64", "9000000000000000000"),
        ("fp16", "0.5"),
        ("bf16", "-2.25"),
        ("fp32", "1e-5"),
        ("fp64", "3.25"),
    ] {
        let arg: Value =
            serde_json::from_str(&format!(r#"{{"type": "{ty}", "value": {value}}}"#)).unwrap();
        assert!(scalar(&arg).is_ok(), "{ty}");
    }
    let unknown: Value = serde_json::from_str(r#"{"type": "nvTmaDesc", "value": 0}"#).unwrap();
    assert!(scalar(&unknown).is_err());
}
