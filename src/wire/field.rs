//! Fixed-layout field codecs and the [`Block`] trait.
//!
//! Every SBE block (a message's root block or one entry of a repeating
//! group) is a plain `Copy` struct declared with `wire_block!`, which
//! derives its byte layout from the field order: offsets are the running sum
//! of the field sizes, checked at compile time against the block length
//! written next to the struct name. Reads and writes go through
//! [`Field::get`]/[`Field::put`], which never panic: an out-of-range read
//! yields zero and an out-of-range write is skipped (both are impossible when
//! the caller sized the slice from [`Block::BLOCK_LENGTH`], which the decoder
//! and encoder always do; a `debug_assert!` says so).

/// One primitive or fixed-size field type on the wire (little-endian).
pub trait Field: Copy + Sized {
    /// Encoded size in bytes.
    const SIZE: usize;
    /// The type's name in `schema/pricewire-sbe.xml`.
    const SBE_TYPE: &'static str;
    /// Reads the field at `off`; zero if the slice is too short.
    fn get(b: &[u8], off: usize) -> Self;
    /// Writes the field at `off`; skipped if the slice is too short.
    fn put(self, b: &mut [u8], off: usize);
}

#[inline(always)]
pub(crate) fn get_array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    debug_assert!(off + N <= b.len(), "read past block end");
    match b.get(off..).and_then(|s| s.first_chunk::<N>()) {
        Some(a) => *a,
        None => [0; N],
    }
}

#[inline(always)]
pub(crate) fn put_array<const N: usize>(b: &mut [u8], off: usize, v: [u8; N]) {
    debug_assert!(off + N <= b.len(), "write past block end");
    if let Some(dst) = b.get_mut(off..).and_then(|s| s.first_chunk_mut::<N>()) {
        *dst = v;
    }
}

macro_rules! int_field {
    ($($ty:ty => $sbe:literal),* $(,)?) => {$(
        impl Field for $ty {
            const SIZE: usize = std::mem::size_of::<$ty>();
            const SBE_TYPE: &'static str = $sbe;
            #[inline(always)]
            fn get(b: &[u8], off: usize) -> Self {
                <$ty>::from_le_bytes(get_array(b, off))
            }
            #[inline(always)]
            fn put(self, b: &mut [u8], off: usize) {
                put_array(b, off, self.to_le_bytes())
            }
        }
    )*};
}

int_field!(u8 => "uint8", u16 => "uint16", u32 => "uint32", u64 => "uint64", i64 => "int64");

/// `BooleanType` on the wire: one byte, 0 = false, 1 = true. Any non-zero
/// byte reads as true (senders must write 0 or 1).
impl Field for bool {
    const SIZE: usize = 1;
    const SBE_TYPE: &'static str = "BooleanType";
    #[inline(always)]
    fn get(b: &[u8], off: usize) -> Self {
        u8::get(b, off) != 0
    }
    #[inline(always)]
    fn put(self, b: &mut [u8], off: usize) {
        u8::from(self).put(b, off)
    }
}

/// Length of a [`Name16`] on the wire.
pub const NAME_LEN: usize = 16;

/// A symbol or tier name: `char[16]`, ASCII/UTF-8 bytes padded with NUL.
/// Kept as the raw 16 bytes so decoding is a copy and round-trips exactly.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Name16(pub [u8; NAME_LEN]);

impl Name16 {
    /// Pads `name` with NUL. Refused when longer than 16 bytes or when it
    /// contains a NUL (which would end the name early on the far side).
    pub fn new(name: &str) -> Result<Name16, crate::wire::EncodeError> {
        let bytes = name.as_bytes();
        if bytes.len() > NAME_LEN || bytes.contains(&0) {
            return Err(crate::wire::EncodeError::InvalidName { len: bytes.len() });
        }
        let mut out = [0u8; NAME_LEN];
        for (dst, src) in out.iter_mut().zip(bytes) {
            *dst = *src;
        }
        Ok(Name16(out))
    }

    /// The name's bytes up to the first NUL.
    pub fn as_bytes(&self) -> &[u8] {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        self.0.get(..end).unwrap_or(&[])
    }

    /// The name as text, if it is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.as_bytes()).ok()
    }

    /// True when every byte is NUL (a symbol reference by id only).
    pub fn is_empty(&self) -> bool {
        self.0[0] == 0
    }
}

impl std::fmt::Debug for Name16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl std::fmt::Display for Name16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

impl Field for Name16 {
    const SIZE: usize = NAME_LEN;
    const SBE_TYPE: &'static str = "Name16";
    #[inline(always)]
    fn get(b: &[u8], off: usize) -> Self {
        Name16(get_array(b, off))
    }
    #[inline(always)]
    fn put(self, b: &mut [u8], off: usize) {
        put_array(b, off, self.0)
    }
}

/// Describes one field of a block, for the schema test, the annotated hex
/// dumps and the generated layout tables in `docs/protocol.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    /// Rust field name (snake_case); the schema uses its camelCase form.
    pub name: &'static str,
    /// Encoded size in bytes.
    pub size: usize,
    /// Type name in the SBE schema.
    pub sbe_type: &'static str,
    /// The field's documentation, from its doc comment.
    pub doc: &'static str,
    /// The schema version that added the field (`sinceVersion` in the
    /// schema); 0 for a field of the first version.
    pub since_version: u16,
}

/// A fixed-size SBE block with a paired encoder and decoder.
pub trait Block: Copy {
    /// Encoded length of the block at the current schema version.
    const BLOCK_LENGTH: u16;
    /// The shortest block a decoder accepts: the fields every schema
    /// version had (those without a `since_version`). A block from an
    /// older sender that ends before a later field reads that field as 0.
    const BLOCK_LENGTH_MIN: u16 = Self::BLOCK_LENGTH;
    /// Fields in wire order; offsets are the running sum of sizes.
    const FIELDS: &'static [FieldInfo];
    /// Reads the block from `b`, which holds at least `BLOCK_LENGTH` bytes.
    fn read(b: &[u8]) -> Self;
    /// Writes the block into `b`, which holds at least `BLOCK_LENGTH` bytes.
    fn write(&self, b: &mut [u8]);
}

/// Declares a `Copy` block struct, its [`Block`] impl and a compile-time
/// check that the fields add up to the declared block length.
macro_rules! wire_block {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident [$len:literal] {
            $(
                $(#[doc = $doc:literal])*
                pub $field:ident : $ty:ty $(=> $sbe:literal)? $(; since $since:literal)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        $vis struct $name {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl $crate::wire::field::Block for $name {
            const BLOCK_LENGTH: u16 = $len;
            const BLOCK_LENGTH_MIN: u16 = 0 $(+ wire_block!(@base <$ty as $crate::wire::field::Field>::SIZE $(, $since)?))*;
            const FIELDS: &'static [$crate::wire::field::FieldInfo] = &[$(
                $crate::wire::field::FieldInfo {
                    name: stringify!($field),
                    size: <$ty as $crate::wire::field::Field>::SIZE,
                    sbe_type: wire_block!(@sbe $ty $(, $sbe)?),
                    doc: concat!($($doc, "\n",)* ""),
                    since_version: 0 $(+ $since)?,
                }
            ),*];

            #[inline(always)]
            #[allow(unused_mut, unused_assignments, unused_variables, unused_comparisons, reason = "an empty block has no field to read and length 0")]
            fn read(b: &[u8]) -> Self {
                debug_assert!(b.len() >= $len, "block shorter than its length");
                let mut off = 0usize;
                $(
                    let $field = <$ty as $crate::wire::field::Field>::get(b, off);
                    off += <$ty as $crate::wire::field::Field>::SIZE;
                )*
                Self { $($field),* }
            }

            #[inline(always)]
            #[allow(unused_mut, unused_assignments, unused_variables, unused_comparisons, reason = "an empty block has no field to read and length 0")]
            fn write(&self, b: &mut [u8]) {
                debug_assert!(b.len() >= $len, "block shorter than its length");
                let mut off = 0usize;
                $(
                    $crate::wire::field::Field::put(self.$field, b, off);
                    off += <$ty as $crate::wire::field::Field>::SIZE;
                )*
            }
        }

        const _: () = assert!(
            0 $(+ <$ty as $crate::wire::field::Field>::SIZE)* == $len,
            concat!("fields of ", stringify!($name), " do not add up to its block length")
        );
    };
    (@sbe $ty:ty) => { <$ty as $crate::wire::field::Field>::SBE_TYPE };
    (@sbe $ty:ty, $sbe:literal) => { $sbe };
    // A field of the first version counts towards the shortest block; a
    // later one (`; since N`) does not.
    (@base $size:expr) => { ($size) as u16 };
    (@base $size:expr, $since:literal) => { 0u16 };
}

pub(crate) use wire_block;
