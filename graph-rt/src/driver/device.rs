//! Driver initialisation, devices and what the installed driver supports.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use graph_rt_sys::{CUdevice, CUdevice_attribute as Attr};

use super::call::cu;
use crate::error::Result;

/// Initialises the driver once per process (`cuInit(0)`); later calls return the first outcome.
pub fn init() -> Result<()> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    // SAFETY: cuInit has no preconditions.
    INIT.get_or_init(|| unsafe { cu!(cuInit(0)) }).clone()
}

/// The installed driver's CUDA version (`cuDriverGetVersion`), e.g. `13000` for CUDA 13.0.
pub fn driver_version() -> Result<i32> {
    Ok(graph_rt_sys::driver()?.version())
}

/// A CUDA device, by ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    raw: CUdevice,
    ordinal: usize,
}

impl Device {
    /// How many CUDA devices the driver sees.
    pub fn count() -> Result<usize> {
        init()?;
        let mut n: c_int = 0;
        // SAFETY: valid out-pointer.
        unsafe { cu!(cuDeviceGetCount(&mut n)) }?;
        Ok(n.max(0) as usize)
    }

    /// The device of the given ordinal.
    pub fn get(ordinal: usize) -> Result<Self> {
        init()?;
        let index = c_int::try_from(ordinal).map_err(|_| {
            let reason = format!("ordinal {ordinal} is too large");
            crate::Error::misuse(
                "cuDeviceGet",
                crate::error::Misuse::TooLarge { what: "ordinal" },
                reason,
            )
        })?;
        let mut raw = 0;
        // SAFETY: valid out-pointer.
        unsafe { cu!(cuDeviceGet(&mut raw, index)) }?;
        Ok(Self { raw, ordinal })
    }

    /// The raw `CUdevice`.
    pub fn as_raw(&self) -> CUdevice {
        self.raw
    }

    /// The ordinal this device was opened with.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, e.g. `NVIDIA H200`.
    pub fn name(&self) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within them.
        unsafe {
            cu!(cuDeviceGetName(
                buf.as_mut_ptr(),
                buf.len() as c_int,
                self.raw
            ))
        }?;
        // SAFETY: NUL-terminated by the driver (checked above).
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// The device's UUID (`cuDeviceGetUuid_v2`, which gives MIG instances their own; else
    /// `cuDeviceGetUuid`). A driver with neither is an [`Error::Load`](crate::Error::Load).
    pub fn uuid(&self) -> Result<[u8; 16]> {
        let mut raw = graph_rt_sys::CUuuid { bytes: [0; 16] };
        // SAFETY: a valid device handle and an out-pointer to a 16-byte CUuuid.
        match unsafe { cu!(cuDeviceGetUuid_v2(&mut raw, self.raw)) } {
            // SAFETY: as above.
            Err(crate::Error::Load(_)) => unsafe { cu!(cuDeviceGetUuid(&mut raw, self.raw)) }?,
            r => r?,
        }
        Ok(raw.bytes.map(|b| b as u8))
    }

    /// Reads one device attribute (`cuDeviceGetAttribute`).
    pub fn attribute(&self, attribute: Attr) -> Result<i32> {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        unsafe { cu!(cuDeviceGetAttribute(&mut v, attribute, self.raw)) }?;
        Ok(v)
    }

    /// Compute capability as `(major, minor)`, e.g. `(9, 0)`.
    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        Ok((
            self.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            self.attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        let mut bytes = 0;
        // SAFETY: valid out-pointer.
        unsafe { cu!(cuDeviceTotalMem(&mut bytes, self.raw)) }?;
        Ok(bytes)
    }

    /// Number of streaming multiprocessors.
    pub fn multiprocessor_count(&self) -> Result<i32> {
        self.attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    }
}

/// A driver capability graph-rt can use, and whether this driver and device have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    /// What it is.
    pub name: &'static str,
    /// The driver function it needs.
    pub symbol: &'static str,
    /// The CUDA version that introduced it (e.g. `12040`).
    pub since: i32,
    /// Whether the installed driver resolves the function (and the device supports it).
    pub supported: bool,
}

/// Which graph features the installed driver supports. With a device, device attributes decide
/// as well (memory pools).
pub fn graph_features(device: Option<&Device>) -> Result<Vec<Feature>> {
    let driver = graph_rt_sys::driver()?;
    // (what, the function it needs, that function's ABI version, the CUDA version of the feature)
    let table: [(&str, &'static CStr, i32, i32); 9] = [
        (
            "stream capture into an existing graph",
            c"cuStreamBeginCaptureToGraph",
            12030,
            12030,
        ),
        (
            "conditional nodes (IF, WHILE)",
            c"cuGraphConditionalHandleCreate",
            12030,
            12030,
        ),
        (
            "conditional SWITCH nodes",
            c"cuGraphConditionalHandleCreate",
            12030,
            12080,
        ),
        ("graph edge data", c"cuGraphAddNode", 12030, 12030),
        (
            "kernel parameter layout (cuFuncGetParamInfo)",
            c"cuFuncGetParamInfo",
            12040,
            12040,
        ),
        (
            "device-updatable kernel nodes",
            c"cuGraphAddNode",
            12030,
            12040,
        ),
        (
            "instantiate with parameters (upload, device launch)",
            c"cuGraphInstantiateWithParams",
            12000,
            12000,
        ),
        (
            "whole-graph exec update with result info",
            c"cuGraphExecUpdate",
            12000,
            12000,
        ),
        (
            "stream-ordered allocation (memory pools)",
            c"cuMemAllocAsync",
            11020,
            11020,
        ),
    ];
    let pools = match device {
        Some(d) => d.attribute(Attr::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0,
        None => true,
    };
    Ok(table
        .into_iter()
        .map(|(name, symbol, abi, since)| {
            let resolves =
                since <= driver.effective_version() && driver.resolve(symbol, abi).is_ok();
            Feature {
                name,
                symbol: symbol.to_str().unwrap_or_default(),
                since,
                supported: resolves && (since != 11020 || pools),
            }
        })
        .collect())
}
