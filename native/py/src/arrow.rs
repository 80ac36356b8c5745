//! The tables' columns (kafkawire_core::columns) handed to pyarrow through the Arrow C data
//! interface: the PyCapsule protocol, where `pa.array(column, type=...)` calls
//! `__arrow_c_array__` with the type it wants.
use std::ffi::CString;

use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::DataType;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

pub use kafkawire_core::columns::Col;

/// One column taken out of the rows, for pyarrow to import once.
#[pyclass(module = "dissector._native")]
pub struct ArrowColumn {
    col: Option<Col>,
}

impl ArrowColumn {
    pub fn new(col: Col) -> Self {
        ArrowColumn { col: Some(col) }
    }
}

#[pymethods]
impl ArrowColumn {
    /// (schema capsule, array capsule) of the column as the type asked for (`requested_schema`,
    /// an "arrow_schema" capsule), or its own; a column is exported once.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyCapsule>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let col = self
            .col
            .take()
            .ok_or_else(|| PyValueError::new_err("this column was exported already"))?;
        let ty = match &requested_schema {
            Some(c) => {
                let ptr = c.pointer_checked(Some(c"arrow_schema"))?;
                // SAFETY: an "arrow_schema" capsule holds an FFI_ArrowSchema (the protocol's
                // contract), alive while the capsule is
                let schema = unsafe { &*(ptr.as_ptr() as *const FFI_ArrowSchema) };
                DataType::try_from(schema).map_err(|e| PyValueError::new_err(e.to_string()))?
            }
            None => col.default_type(),
        };
        let data = col.into_data(&ty).map_err(PyValueError::new_err)?;
        let schema =
            FFI_ArrowSchema::try_from(&ty).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let array = FFI_ArrowArray::new(&data);
        let schema = PyCapsule::new(py, schema, Some(CString::from(c"arrow_schema")))?;
        let array = PyCapsule::new(py, array, Some(CString::from(c"arrow_array")))?;
        Ok((schema, array))
    }
}
