//! Column buffers in Arrow's memory layout, handed to pyarrow as bytes it wraps without a copy
//! (pyarrow.Array.from_buffers; landing/local.py does that side). Only the column types the
//! landing tables use.
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// Numbers as Arrow lays them out: little-endian.
trait Le {
    fn put(&self, out: &mut Vec<u8>);
}

macro_rules! le {
    ($($t:ty),*) => { $(impl Le for $t { fn put(&self, out: &mut Vec<u8>) { out.extend_from_slice(&self.to_le_bytes()) } })* };
}
le!(i64, i32, i16, i8, f64);

/// A validity bitmap (bit set = value present, least significant bit first).
#[derive(Default)]
pub struct Bits {
    bytes: Vec<u8>,
    len: usize,
    zeros: usize,
}

impl Bits {
    pub fn push(&mut self, v: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if v {
            *self.bytes.last_mut().unwrap() |= 1 << (self.len % 8);
        } else {
            self.zeros += 1;
        }
        self.len += 1;
    }
}

pub enum Col {
    I64(Vec<i64>, Bits),
    I32(Vec<i32>, Bits),
    I16(Vec<i16>, Bits),
    I8(Vec<i8>, Bits),
    F64(Vec<f64>, Bits),
    /// values bit-packed like validity
    Bool(Bits, Bits),
    /// offsets (one more than values), UTF-8 data
    Str(Vec<i32>, Vec<u8>, Bits),
    /// list offsets and the child column
    List(Vec<i32>, Box<Col>, Bits),
    /// the field columns
    Struct(Vec<Col>, Bits),
}

impl Col {
    pub fn i64() -> Self {
        Col::I64(Vec::new(), Bits::default())
    }
    pub fn i32() -> Self {
        Col::I32(Vec::new(), Bits::default())
    }
    pub fn i16() -> Self {
        Col::I16(Vec::new(), Bits::default())
    }
    pub fn i8() -> Self {
        Col::I8(Vec::new(), Bits::default())
    }
    pub fn f64() -> Self {
        Col::F64(Vec::new(), Bits::default())
    }
    pub fn bool() -> Self {
        Col::Bool(Bits::default(), Bits::default())
    }
    pub fn str() -> Self {
        Col::Str(vec![0], Vec::new(), Bits::default())
    }
    pub fn list_of(child: Col) -> Self {
        Col::List(vec![0], Box::new(child), Bits::default())
    }
    /// binary columns are laid out as strings are (offsets and data)
    pub fn binary() -> Self {
        Col::str()
    }
    pub fn struct_of(fields: Vec<Col>) -> Self {
        Col::Struct(fields, Bits::default())
    }

    pub fn len(&self) -> usize {
        match self {
            Col::I64(_, b)
            | Col::I32(_, b)
            | Col::I16(_, b)
            | Col::I8(_, b)
            | Col::F64(_, b)
            | Col::Bool(_, b)
            | Col::Str(_, _, b)
            | Col::List(_, _, b)
            | Col::Struct(_, b) => b.len,
        }
    }

    /// A string column's UTF-8 bytes held (0 for other columns).
    pub fn text_bytes(&self) -> usize {
        match self {
            Col::Str(_, d, _) => d.len(),
            _ => 0,
        }
    }

    pub fn int(&mut self, v: Option<i64>) {
        let x = v.unwrap_or(0);
        match self {
            Col::I64(vals, b) => {
                vals.push(x);
                b.push(v.is_some());
            }
            Col::I32(vals, b) => {
                vals.push(x as i32);
                b.push(v.is_some());
            }
            Col::I16(vals, b) => {
                vals.push(x as i16);
                b.push(v.is_some());
            }
            Col::I8(vals, b) => {
                vals.push(x as i8);
                b.push(v.is_some());
            }
            _ => panic!("int into a column of another type"),
        }
    }

    pub fn float(&mut self, v: Option<f64>) {
        let Col::F64(vals, b) = self else {
            panic!("float into a column of another type")
        };
        vals.push(v.unwrap_or(0.0));
        b.push(v.is_some());
    }

    pub fn boolean(&mut self, v: Option<bool>) {
        let Col::Bool(vals, b) = self else {
            panic!("bool into a column of another type")
        };
        vals.push(v.unwrap_or(false));
        b.push(v.is_some());
    }

    pub fn text(&mut self, v: Option<&str>) {
        let Col::Str(offsets, data, b) = self else {
            panic!("str into a column of another type")
        };
        if let Some(s) = v {
            data.extend_from_slice(s.as_bytes());
        }
        offsets.push(data.len() as i32);
        b.push(v.is_some());
    }

    /// Bytes into a binary column.
    pub fn bytes(&mut self, v: Option<&[u8]>) {
        let Col::Str(offsets, data, b) = self else {
            panic!("bytes into a column of another type")
        };
        if let Some(s) = v {
            data.extend_from_slice(s);
        }
        offsets.push(data.len() as i32);
        b.push(v.is_some());
    }

    /// A struct column's next value (never null): its fields are pushed to by `fill`.
    pub fn row(&mut self, fill: impl FnOnce(&mut [Col])) {
        let Col::Struct(fields, b) = self else {
            panic!("struct into a column of another type")
        };
        fill(fields);
        b.push(true);
    }

    /// A list column's next value: its items are pushed to the child by `fill`.
    pub fn list(&mut self, present: bool, fill: impl FnOnce(&mut Col)) {
        let Col::List(offsets, child, b) = self else {
            panic!("list into a column of another type")
        };
        if present {
            fill(child);
        }
        offsets.push(child.len() as i32);
        b.push(present);
    }

    /// (length, null count, [validity or None, buffers...], child spec or None) for
    /// pyarrow.Array.from_buffers, and the column emptied.
    pub fn take(&mut self, py: Python<'_>) -> PyResult<Py<PyTuple>> {
        fn valid<'py>(py: Python<'py>, b: &Bits) -> Bound<'py, PyAny> {
            if b.zeros == 0 {
                py.None().into_bound(py)
            } else {
                PyBytes::new(py, &b.bytes).into_any()
            }
        }
        fn raw<T: Le>(py: Python<'_>, v: &[T]) -> Py<PyAny> {
            let mut out = Vec::with_capacity(std::mem::size_of_val(v));
            for x in v {
                x.put(&mut out);
            }
            PyBytes::new(py, &out).into_any().unbind()
        }
        /// (length, null count, validity, data, the last slot: child spec, string data or None)
        fn spec<'py>(
            py: Python<'py>,
            b: &Bits,
            data: Bound<'py, PyAny>,
            last: Option<Bound<'py, PyAny>>,
        ) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(
                py,
                [
                    b.len.into_pyobject(py)?.into_any(),
                    b.zeros.into_pyobject(py)?.into_any(),
                    valid(py, b),
                    data,
                    last.unwrap_or_else(|| py.None().into_bound(py)),
                ],
            )
        }
        let out = match self {
            Col::I64(v, b) => spec(py, b, raw(py, v).into_bound(py), None)?,
            Col::I32(v, b) => spec(py, b, raw(py, v).into_bound(py), None)?,
            Col::I16(v, b) => spec(py, b, raw(py, v).into_bound(py), None)?,
            Col::I8(v, b) => spec(py, b, raw(py, v).into_bound(py), None)?,
            Col::F64(v, b) => spec(py, b, raw(py, v).into_bound(py), None)?,
            Col::Bool(v, b) => spec(py, b, PyBytes::new(py, &v.bytes).into_any(), None)?,
            Col::Str(o, d, b) => spec(
                py,
                b,
                raw(py, o).into_bound(py),
                Some(PyBytes::new(py, d).into_any()),
            )?,
            Col::List(o, child, b) => {
                let c = child.take(py)?;
                spec(
                    py,
                    b,
                    raw(py, o).into_bound(py),
                    Some(c.into_bound(py).into_any()),
                )?
            }
            Col::Struct(fields, b) => {
                let specs = PyList::empty(py);
                for f in fields.iter_mut() {
                    specs.append(f.take(py)?)?;
                }
                spec(py, b, py.None().into_bound(py), Some(specs.into_any()))?
            }
        };
        *self = self.empty_like();
        Ok(out.unbind())
    }

    fn empty_like(&self) -> Col {
        match self {
            Col::I64(..) => Col::i64(),
            Col::I32(..) => Col::i32(),
            Col::I16(..) => Col::i16(),
            Col::I8(..) => Col::i8(),
            Col::F64(..) => Col::f64(),
            Col::Bool(..) => Col::bool(),
            Col::Str(..) => Col::str(),
            Col::List(_, c, _) => Col::list_of(c.empty_like()),
            Col::Struct(f, _) => Col::struct_of(f.iter().map(Col::empty_like).collect()),
        }
    }
}
