//! Persistent sets of small integers (the interned variables of
//! [`crate::term::Cache`]), shared between the sets made from them.
//!
//! A set is a big-endian Patricia tree whose leaves are 64-bit bitmaps (the
//! shape of Haskell's `Data.IntSet`): its shape depends only on its
//! elements, adding or removing one element copies only the path to it
//! (O(log n) nodes, the rest shared), and a union shares every subtree of
//! either side that the other does not touch. So the free variables of a
//! `let` chain, where each binding's set is its body's minus a name plus a
//! few names, cost a few nodes per binding instead of a copy of every
//! variable live there: storing the sets of all n nodes of a chain
//! reading n variables takes O(n log n) memory, not O(n^2).

use std::rc::Rc;

/// A set of `u32`s. Cloning it is O(1) (it is shared).
#[derive(Clone, Default)]
pub struct IdSet(Option<Rc<Node>>);

enum Node {
    /// The elements `prefix + i` for every bit i set in `bits`
    /// (`prefix` a multiple of 64, `bits` not zero).
    Tip { prefix: u32, bits: u64 },
    /// Elements whose bits above `mask` (a single bit, at least 64) are
    /// `prefix`: those with the `mask` bit clear in `left`, set in `right`.
    Bin { prefix: u32, mask: u32, left: Rc<Node>, right: Rc<Node> },
}

const TIP_BITS: u32 = 64;

fn tip_prefix(x: u32) -> u32 {
    x & !(TIP_BITS - 1)
}

fn tip_bit(x: u32) -> u64 {
    1u64 << (x & (TIP_BITS - 1))
}

/// The bits of `x` above the single bit `mask`.
fn above(x: u32, mask: u32) -> u32 {
    x & !(mask | (mask - 1))
}

fn is_left(x: u32, mask: u32) -> bool {
    x & mask == 0
}

/// The highest bit in which two prefixes differ.
fn branch_mask(p1: u32, p2: u32) -> u32 {
    1u32 << (31 - (p1 ^ p2).leading_zeros())
}

/// Joins two trees with disjoint prefixes.
fn link(p1: u32, t1: Rc<Node>, p2: u32, t2: Rc<Node>) -> Rc<Node> {
    let mask = branch_mask(p1, p2);
    let prefix = above(p1, mask);
    if is_left(p1, mask) {
        Rc::new(Node::Bin { prefix, mask, left: t1, right: t2 })
    } else {
        Rc::new(Node::Bin { prefix, mask, left: t2, right: t1 })
    }
}

/// `Bin` of two children, reusing `orig` when they are its own.
fn bin(orig: &Rc<Node>, prefix: u32, mask: u32, left: Option<Rc<Node>>, right: Option<Rc<Node>>) -> Option<Rc<Node>> {
    match (left, right) {
        (None, None) => None,
        (Some(l), None) => Some(l),
        (None, Some(r)) => Some(r),
        (Some(l), Some(r)) => {
            if let Node::Bin { left: ol, right: or, .. } = &**orig {
                if Rc::ptr_eq(ol, &l) && Rc::ptr_eq(or, &r) {
                    return Some(orig.clone());
                }
            }
            Some(Rc::new(Node::Bin { prefix, mask, left: l, right: r }))
        }
    }
}

/// `t` with the elements of the tip (`prefix`, `bits`) added.
fn insert_tip(t: &Rc<Node>, prefix: u32, bits: u64) -> Rc<Node> {
    match &**t {
        Node::Tip { prefix: p, bits: b } => {
            if *p == prefix {
                if b | bits == *b {
                    t.clone()
                } else {
                    Rc::new(Node::Tip { prefix, bits: b | bits })
                }
            } else {
                link(prefix, Rc::new(Node::Tip { prefix, bits }), *p, t.clone())
            }
        }
        Node::Bin { prefix: p, mask, left, right } => {
            if above(prefix, *mask) != *p {
                link(prefix, Rc::new(Node::Tip { prefix, bits }), *p, t.clone())
            } else if is_left(prefix, *mask) {
                let l = insert_tip(left, prefix, bits);
                bin(t, *p, *mask, Some(l), Some(right.clone())).expect("not empty")
            } else {
                let r = insert_tip(right, prefix, bits);
                bin(t, *p, *mask, Some(left.clone()), Some(r)).expect("not empty")
            }
        }
    }
}

fn union(a: &Rc<Node>, b: &Rc<Node>) -> Rc<Node> {
    if Rc::ptr_eq(a, b) {
        return a.clone();
    }
    match (&**a, &**b) {
        // A tip into a tip that holds it already is that tip: either side.
        (Node::Tip { prefix: p, bits: x }, Node::Tip { prefix: q, bits: y }) if p == q && x | y == *x => a.clone(),
        (Node::Tip { prefix, bits }, _) => insert_tip(b, *prefix, *bits),
        (_, Node::Tip { prefix, bits }) => insert_tip(a, *prefix, *bits),
        (
            Node::Bin { prefix: p1, mask: m1, left: l1, right: r1 },
            Node::Bin { prefix: p2, mask: m2, left: l2, right: r2 },
        ) => {
            if m1 > m2 {
                // a branches higher: b goes into one of its sides.
                if above(*p2, *m1) != *p1 {
                    link(*p1, a.clone(), *p2, b.clone())
                } else if is_left(*p2, *m1) {
                    bin(a, *p1, *m1, Some(union(l1, b)), Some(r1.clone())).expect("not empty")
                } else {
                    bin(a, *p1, *m1, Some(l1.clone()), Some(union(r1, b))).expect("not empty")
                }
            } else if m2 > m1 {
                if above(*p1, *m2) != *p2 {
                    link(*p1, a.clone(), *p2, b.clone())
                } else if is_left(*p1, *m2) {
                    bin(b, *p2, *m2, Some(union(a, l2)), Some(r2.clone())).expect("not empty")
                } else {
                    bin(b, *p2, *m2, Some(l2.clone()), Some(union(a, r2))).expect("not empty")
                }
            } else if p1 == p2 {
                let (l, r) = (union(l1, l2), union(r1, r2));
                if Rc::ptr_eq(&l, l2) && Rc::ptr_eq(&r, r2) {
                    b.clone()
                } else {
                    bin(a, *p1, *m1, Some(l), Some(r)).expect("not empty")
                }
            } else {
                link(*p1, a.clone(), *p2, b.clone())
            }
        }
    }
}

/// The bits of the tip of `t` with prefix `prefix`, if it has one.
fn tip_bits(t: &Rc<Node>, prefix: u32) -> Option<u64> {
    let mut t = t;
    loop {
        match &**t {
            Node::Tip { prefix: p, bits } => return (*p == prefix).then_some(*bits),
            Node::Bin { prefix: p, mask, left, right } => {
                if above(prefix, *mask) != *p {
                    return None;
                }
                t = if is_left(prefix, *mask) { left } else { right };
            }
        }
    }
}

/// The elements of both (None: none), sharing what it can of `a`.
fn intersection(a: &Rc<Node>, b: &Rc<Node>) -> Option<Rc<Node>> {
    if Rc::ptr_eq(a, b) {
        return Some(a.clone());
    }
    match (&**a, &**b) {
        (Node::Tip { prefix, bits }, _) => {
            let both = bits & tip_bits(b, *prefix)?;
            match both {
                0 => None,
                x if x == *bits => Some(a.clone()),
                x => Some(Rc::new(Node::Tip { prefix: *prefix, bits: x })),
            }
        }
        (_, Node::Tip { .. }) => intersection(b, a),
        (
            Node::Bin { prefix: p1, mask: m1, left: l1, right: r1 },
            Node::Bin { prefix: p2, mask: m2, left: l2, right: r2 },
        ) => {
            if m1 > m2 {
                if above(*p2, *m1) != *p1 {
                    None
                } else if is_left(*p2, *m1) {
                    intersection(l1, b)
                } else {
                    intersection(r1, b)
                }
            } else if m2 > m1 {
                intersection(b, a)
            } else if p1 == p2 {
                bin(a, *p1, *m1, intersection(l1, l2), intersection(r1, r2))
            } else {
                None
            }
        }
    }
}

/// `t` without `x` (None: empty); `t` itself if `x` is not in it.
fn remove(t: &Rc<Node>, x: u32) -> Option<Rc<Node>> {
    match &**t {
        Node::Tip { prefix, bits } => {
            if *prefix != tip_prefix(x) || bits & tip_bit(x) == 0 {
                Some(t.clone())
            } else if bits & !tip_bit(x) == 0 {
                None
            } else {
                Some(Rc::new(Node::Tip { prefix: *prefix, bits: bits & !tip_bit(x) }))
            }
        }
        Node::Bin { prefix, mask, left, right } => {
            if above(x, *mask) != *prefix {
                Some(t.clone())
            } else if is_left(x, *mask) {
                bin(t, *prefix, *mask, remove(left, x), Some(right.clone()))
            } else {
                bin(t, *prefix, *mask, Some(left.clone()), remove(right, x))
            }
        }
    }
}

impl IdSet {
    pub fn new() -> IdSet {
        IdSet(None)
    }

    pub fn singleton(x: u32) -> IdSet {
        IdSet(Some(Rc::new(Node::Tip { prefix: tip_prefix(x), bits: tip_bit(x) })))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub fn contains(&self, x: u32) -> bool {
        let mut t = match &self.0 {
            None => return false,
            Some(t) => t,
        };
        loop {
            match &**t {
                Node::Tip { prefix, bits } => return *prefix == tip_prefix(x) && bits & tip_bit(x) != 0,
                Node::Bin { prefix, mask, left, right } => {
                    if above(x, *mask) != *prefix {
                        return false;
                    }
                    t = if is_left(x, *mask) { left } else { right };
                }
            }
        }
    }

    /// The union, sharing what it can of both.
    pub fn union(&self, other: &IdSet) -> IdSet {
        match (&self.0, &other.0) {
            (None, _) => other.clone(),
            (_, None) => self.clone(),
            (Some(a), Some(b)) => IdSet(Some(union(a, b))),
        }
    }

    /// The elements of both.
    pub fn intersection(&self, other: &IdSet) -> IdSet {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => IdSet(intersection(a, b)),
            _ => IdSet(None),
        }
    }

    /// The set without `x` (the same set, shared, if `x` is not in it).
    pub fn without(&self, x: u32) -> IdSet {
        match &self.0 {
            None => IdSet(None),
            Some(t) => IdSet(remove(t, x)),
        }
    }

    /// Is this the same shared set as `other` (a cheap test, not equality)?
    pub fn same(&self, other: &IdSet) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The elements, in increasing order.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut stack: Vec<&Rc<Node>> = self.0.iter().collect();
        while let Some(t) = stack.pop() {
            match &**t {
                Node::Tip { prefix, bits } => {
                    let mut b = *bits;
                    while b != 0 {
                        out.push(prefix + b.trailing_zeros());
                        b &= b - 1;
                    }
                }
                Node::Bin { left, right, .. } => {
                    stack.push(right);
                    stack.push(left);
                }
            }
        }
        out
    }

    pub fn len(&self) -> usize {
        let mut n = 0;
        let mut stack: Vec<&Rc<Node>> = self.0.iter().collect();
        while let Some(t) = stack.pop() {
            match &**t {
                Node::Tip { bits, .. } => n += bits.count_ones() as usize,
                Node::Bin { left, right, .. } => {
                    stack.push(right);
                    stack.push(left);
                }
            }
        }
        n
    }
}

impl std::fmt::Debug for IdSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.to_vec()).finish()
    }
}
