//! Intrusive doubly linked lists over a slab (`Vec` of slots linked by index): the
//! queues of the RAM tier's policies and the open-file cache's LRU. O(1) push, unlink
//! and move, no allocation per operation, and per-list byte and length totals.

/// No slot.
pub const NIL: u32 = u32::MAX;

/// A slot's place in its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Links {
    pub prev: u32,
    pub next: u32,
}

impl Default for Links {
    fn default() -> Self {
        Links {
            prev: NIL,
            next: NIL,
        }
    }
}

/// `N` lists (head = most recent) sharing one slab.
#[derive(Debug, Clone)]
pub struct Lists<const N: usize> {
    head: [u32; N],
    tail: [u32; N],
    bytes: [u64; N],
    len: [u32; N],
}

impl<const N: usize> Default for Lists<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Lists<N> {
    pub fn new() -> Self {
        Lists {
            head: [NIL; N],
            tail: [NIL; N],
            bytes: [0; N],
            len: [0; N],
        }
    }

    pub fn head(&self, q: u8) -> u32 {
        self.head[q as usize]
    }

    pub fn tail(&self, q: u8) -> u32 {
        self.tail[q as usize]
    }

    pub fn bytes(&self, q: u8) -> u64 {
        self.bytes[q as usize]
    }

    pub fn len(&self, q: u8) -> u32 {
        self.len[q as usize]
    }

    /// Link slot `i` (weighing `w`) at the head of list `q`.
    pub fn push_front<S>(
        &mut self,
        q: u8,
        i: u32,
        w: u64,
        slots: &mut [S],
        links: impl Fn(&mut S) -> &mut Links,
    ) {
        let q = q as usize;
        let old = self.head[q];
        *links(&mut slots[i as usize]) = Links {
            prev: NIL,
            next: old,
        };
        if old != NIL {
            links(&mut slots[old as usize]).prev = i;
        } else {
            self.tail[q] = i;
        }
        self.head[q] = i;
        self.bytes[q] += w;
        self.len[q] += 1;
    }

    /// Unlink slot `i` (weighing `w`) from list `q`.
    pub fn unlink<S>(
        &mut self,
        q: u8,
        i: u32,
        w: u64,
        slots: &mut [S],
        links: impl Fn(&mut S) -> &mut Links,
    ) {
        let q = q as usize;
        let Links { prev, next } = *links(&mut slots[i as usize]);
        if prev != NIL {
            links(&mut slots[prev as usize]).next = next;
        } else {
            self.head[q] = next;
        }
        if next != NIL {
            links(&mut slots[next as usize]).prev = prev;
        } else {
            self.tail[q] = prev;
        }
        *links(&mut slots[i as usize]) = Links::default();
        self.bytes[q] -= w;
        self.len[q] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_unlink_keep_order_and_totals() {
        let mut slots = vec![Links::default(); 4];
        let mut l: Lists<2> = Lists::new();
        for i in 0..3 {
            l.push_front(0, i, 10, &mut slots, |s| s);
        }
        assert_eq!((l.head(0), l.tail(0), l.len(0), l.bytes(0)), (2, 0, 3, 30));
        l.unlink(0, 1, 10, &mut slots, |s| s);
        assert_eq!(slots[2].next, 0);
        assert_eq!(slots[0].prev, 2);
        l.unlink(0, 0, 10, &mut slots, |s| s);
        assert_eq!((l.head(0), l.tail(0), l.len(0), l.bytes(0)), (2, 2, 1, 10));
        l.push_front(1, 3, 5, &mut slots, |s| s);
        assert_eq!((l.head(1), l.tail(1), l.bytes(1)), (3, 3, 5));
        l.unlink(0, 2, 10, &mut slots, |s| s);
        assert_eq!((l.head(0), l.tail(0), l.len(0)), (NIL, NIL, 0));
    }
}
