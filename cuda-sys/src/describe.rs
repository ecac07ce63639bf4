//! What a [`CUresult`] is called and what it means, as the driver says (`cuGetErrorName`,
//! `cuGetErrorString`): the crate's one safe helper, so that the error types of the crates above
//! it describe driver errors without calling the driver themselves.

use crate::{cuGetErrorName, cuGetErrorString, CUresult};

/// The driver's name of `code` (`"CUDA_ERROR_OUT_OF_MEMORY"`) and its description, each `None`
/// where the driver cannot be loaded or does not know the code.
pub fn describe_result(code: CUresult) -> (Option<String>, Option<String>) {
    let mut name = std::ptr::null();
    let mut text = std::ptr::null();
    // SAFETY: the driver writes pointers to static NUL-terminated strings, or leaves them null;
    // both out-pointers are valid for one write.
    unsafe {
        let _ = cuGetErrorName(code, &mut name);
        let _ = cuGetErrorString(code, &mut text);
    }
    let read = |p: *const std::ffi::c_char| {
        (!p.is_null()).then(|| {
            // SAFETY: non-null pointers from cuGetErrorName/String point at static C strings.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        })
    };
    (read(name), read(text))
}
