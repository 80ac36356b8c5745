//! The tables' columns, built row by row in Arrow's layout. arrow-rs turns a finished column into
//! array data (checking its layout against the type asked for); the buffers move, they are not
//! copied. The bindings hand them on through the Arrow C data interface.
use std::sync::Arc;

use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow_data::ArrayData;
use arrow_schema::{DataType, Field};

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

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// The column's values so far, the column emptied.
    pub fn take(&mut self) -> Col {
        let empty = self.empty_like();
        std::mem::replace(self, empty)
    }

    /// The type a column of this kind has when the caller asks for none (lists' items and
    /// struct fields named as pyarrow names them by default).
    pub fn default_type(&self) -> DataType {
        match self {
            Col::I64(..) => DataType::Int64,
            Col::I32(..) => DataType::Int32,
            Col::I16(..) => DataType::Int16,
            Col::I8(..) => DataType::Int8,
            Col::F64(..) => DataType::Float64,
            Col::Bool(..) => DataType::Boolean,
            Col::Str(..) => DataType::Utf8,
            Col::List(_, c, _) => {
                DataType::List(Arc::new(Field::new("item", c.default_type(), true)))
            }
            Col::Struct(f, _) => DataType::Struct(
                f.iter()
                    .enumerate()
                    .map(|(i, c)| Field::new(format!("f{i}"), c.default_type(), true))
                    .collect(),
            ),
        }
    }

    /// The column as Arrow array data of type `ty` (its buffers moved, not copied); arrow-rs
    /// checks the layout against the type.
    pub fn into_data(self, ty: &DataType) -> Result<ArrayData, String> {
        let (buffers, children, b) = match self {
            Col::I64(v, b) => (vec![Buffer::from_vec(v)], Vec::new(), b),
            Col::I32(v, b) => (vec![Buffer::from_vec(v)], Vec::new(), b),
            Col::I16(v, b) => (vec![Buffer::from_vec(v)], Vec::new(), b),
            Col::I8(v, b) => (vec![Buffer::from_vec(v)], Vec::new(), b),
            Col::F64(v, b) => (vec![Buffer::from_vec(v)], Vec::new(), b),
            Col::Bool(v, b) => (vec![Buffer::from_vec(v.bytes)], Vec::new(), b),
            Col::Str(o, d, b) => (
                vec![Buffer::from_vec(o), Buffer::from_vec(d)],
                Vec::new(),
                b,
            ),
            Col::List(o, child, b) => {
                let DataType::List(item) = ty else {
                    return Err(format!("a list column asked for as {ty}"));
                };
                let child = child.into_data(item.data_type())?;
                (vec![Buffer::from_vec(o)], vec![child], b)
            }
            Col::Struct(fields, b) => {
                let DataType::Struct(types) = ty else {
                    return Err(format!("a struct column asked for as {ty}"));
                };
                if types.len() != fields.len() {
                    return Err(format!(
                        "a struct of {} fields asked for as {ty}",
                        fields.len()
                    ));
                }
                let kids = fields
                    .into_iter()
                    .zip(types.iter())
                    .map(|(c, f)| c.into_data(f.data_type()))
                    .collect::<Result<Vec<_>, _>>()?;
                (Vec::new(), kids, b)
            }
        };
        let nulls = (b.zeros > 0)
            .then(|| NullBuffer::new(BooleanBuffer::new(Buffer::from_vec(b.bytes), 0, b.len)));
        ArrayData::builder(ty.clone())
            .len(b.len)
            .buffers(buffers)
            .child_data(children)
            .nulls(nulls)
            .build()
            .map_err(|e| e.to_string())
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
