//! Which device a cost model belongs to: a key stable across processes and reboots (the
//! device's UUID, as `nvidia-smi -L` prints it), for the cache file's name, and a description
//! (name and key) kept in the model.

use std::fmt::Write;

use graph_rt_sys::CUdevice_attribute as Attr;

use crate::driver::Device;
use crate::error::Result;

/// A device's cache key and description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceId {
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (a MIG instance has its own), or, from a
    /// driver without `cuDeviceGetUuid`, `pci-<domain>-<bus>-<device>`.
    pub(crate) key: String,
    /// The name and the key, e.g. `NVIDIA H200 GPU-…`.
    pub(crate) description: String,
}

/// The key and description of `device`.
pub(crate) fn identify(device: &Device) -> Result<DeviceId> {
    let key = match device.uuid() {
        Ok(bytes) => format_uuid(&bytes),
        // A driver older than CUDA 9.2 has no cuDeviceGetUuid: the PCI address is stable on one
        // machine, which is all a local cache needs.
        Err(crate::Error::Load(_)) => format!(
            "pci-{:04x}-{:02x}-{:02x}",
            device.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            device.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            device.attribute(Attr::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
        ),
        Err(e) => return Err(e),
    };
    Ok(DeviceId {
        description: format!("{} {key}", device.name()?),
        key,
    })
}

/// `bytes` as `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (groups of 4, 2, 2, 2 and 6 bytes).
fn format_uuid(bytes: &[u8; 16]) -> String {
    let mut s = String::from("GPU");
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 0 | 4 | 6 | 8 | 10) {
            s.push('-');
        }
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let bytes = [
            0x8c, 0x3e, 0x0b, 0x1a, 0x12, 0xab, 0xcd, 0x34, 0xef, 0x56, 0x01, 0x23, 0x45, 0x67,
            0x89, 0xab,
        ];
        assert_eq!(
            format_uuid(&bytes),
            "GPU-8c3e0b1a-12ab-cd34-ef56-0123456789ab"
        );
    }
}
