//! The tables' rows (kafkawire_core::rows) as Python sees them: a table's taken columns for
//! pyarrow, what a lander holds, and its state (counts, the topic-name map, the placeholders).
use pyo3::prelude::*;
use pyo3::types::{PyList, PySet};

use crate::arrow::ArrowColumn;
use crate::decode::PyNames;
pub use kafkawire_core::rows::{Rows, TABLES};

/// A table's buffered rows, taken (Engine.rows_take).
#[pyclass(frozen, get_all, module = "dissector._native")]
pub struct Taken {
    /// each column, for pyarrow to import (`pa.array(column, type=...)`)
    pub columns: Py<PyList>,
    /// the rows' partition date column, likewise
    pub date: Py<ArrowColumn>,
    /// the distinct dates among the rows
    pub dates: Vec<Option<String>>,
    /// whether a row names a topic only by its id (a placeholder the writer may resolve later)
    pub marked: bool,
}

impl Taken {
    pub fn of(py: Python<'_>, t: kafkawire_core::rows::Taken) -> PyResult<Self> {
        let cols = PyList::empty(py);
        for c in t.columns {
            cols.append(ArrowColumn::new(c))?;
        }
        Ok(Taken {
            columns: cols.unbind(),
            date: Py::new(py, ArrowColumn::new(t.date))?,
            dates: t.dates,
            marked: t.marked,
        })
    }
}

/// What a row maker holds (rows_pending): rows pending per table, in TABLES' order, and the
/// bytes of JSON and payloads held in them.
#[pyclass(frozen, get_all, module = "dissector._native")]
pub struct Pending {
    pub rows: Vec<usize>,
    pub held: usize,
}

impl Pending {
    pub fn of(rows: &Rows) -> Self {
        Self::from(rows.pending_all())
    }
}

impl From<kafkawire_core::rows::Pending> for Pending {
    fn from(p: kafkawire_core::rows::Pending) -> Self {
        Pending {
            rows: p.rows,
            held: p.held,
        }
    }
}

/// A row maker's state (rows_state): rows written per table, in TABLES' order, its topic-id ->
/// name map (shared: it grows as the run goes on) and the `topic-id:` placeholders its rows hold
/// so far.
#[pyclass(frozen, get_all, module = "dissector._native")]
pub struct RowsState {
    pub counts: Vec<usize>,
    pub names: Py<PyNames>,
    pub unresolved: Py<PySet>,
}

impl RowsState {
    pub fn of(py: Python<'_>, rows: &Rows) -> PyResult<Self> {
        Self::gathered(py, rows.counts, &rows.names, &rows.unresolved.borrow())
    }

    /// A run over buckets' state: the rows gathered, the names and placeholders of them all.
    pub fn gathered(
        py: Python<'_>,
        counts: [usize; 6],
        names: &kafkawire_core::decode::SharedNames,
        unresolved: &std::collections::BTreeSet<String>,
    ) -> PyResult<Self> {
        Ok(RowsState {
            counts: counts.to_vec(),
            names: Py::new(py, PyNames(names.clone()))?,
            unresolved: PySet::new(py, unresolved.iter())?.unbind(),
        })
    }
}

/// The tables' columns the Python side has (table -> names) are the core's, in its order.
pub fn check_columns(given: &std::collections::HashMap<String, Vec<String>>) -> PyResult<()> {
    kafkawire_core::rows::check_columns(given).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// dissector.native.config() asks it as it builds a config with columns, so that a table out of
/// step fails there, before any run.
#[pyfunction]
#[pyo3(name = "check_columns")]
fn check_columns_py(columns: std::collections::HashMap<String, Vec<String>>) -> PyResult<()> {
    check_columns(&columns)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_columns_py, m)?)?;
    m.add_class::<Taken>()?;
    m.add_class::<ArrowColumn>()?;
    m.add_class::<Pending>()?;
    m.add_class::<RowsState>()
}
