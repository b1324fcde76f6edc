//! One compiled component per digest, and a bound on compiles at once.
//!
//! A Python or JavaScript guest compiles to 30–60 MiB of machine code in
//! 10–30 s. Loading the same bytes twice (a settings change, a shadow
//! candidate equal to the live file, one file in two directories) must not
//! map that code twice or compile it twice, so compiled components are shared
//! by digest for as long as one loaded plugin holds them; two loads of the
//! same digest at once wait for one compile.
//!
//! Compiles run in the background (each load is its own task), and at most
//! [`Components::new`]'s `compiles` of them at once: a burst of big guests
//! cannot take every core and all the memory, while a load that finds its
//! artefact cached, or already loaded, never waits for a compile slot.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex};
use wasmtime::component::Component;

/// Compiled components by digest, shared while in use.
pub(super) struct Components {
    by_digest: Mutex<HashMap<String, Arc<Mutex<Weak<Component>>>>>,
    slots: Slots,
}

impl Components {
    /// At most `compiles` compiles at once (at least one).
    pub fn new(compiles: usize) -> Self {
        Components {
            by_digest: Mutex::new(HashMap::new()),
            slots: Slots::new(compiles.max(1)),
        }
    }

    /// The component for `digest`: the one already loaded (with `None`), or
    /// the one `make` returns (with what it said of it), then shared. `make`
    /// takes a compile slot from the [`Slots`] it gets if it compiles.
    pub fn get_or_make<T, E>(
        &self,
        digest: &str,
        make: impl FnOnce(&Slots) -> Result<(Component, T), E>,
    ) -> Result<(Arc<Component>, Option<T>), E> {
        let entry = {
            let mut map = self.by_digest.lock();
            // Drop digests nobody loads or is loading. A slot held by a
            // load in progress (another `Arc`) is kept without locking it,
            // so this never waits on a compile with the map locked.
            map.retain(|_, slot| Arc::strong_count(slot) > 1 || slot.lock().strong_count() > 0);
            map.entry(digest.to_string()).or_default().clone()
        };
        // Held while making: a second load of this digest waits for it.
        let mut weak = entry.lock();
        if let Some(component) = weak.upgrade() {
            return Ok((component, None));
        }
        let (component, made) = make(&self.slots)?;
        let component = Arc::new(component);
        *weak = Arc::downgrade(&component);
        Ok((component, Some(made)))
    }

    /// Digests loaded now, or being loaded: their artefacts must stay in
    /// the compile cache. A slot locked by a load in progress counts without
    /// waiting for it.
    pub fn in_use(&self) -> std::collections::HashSet<String> {
        let map = self.by_digest.lock();
        map.iter()
            .filter(|(_, slot)| slot.try_lock().is_none_or(|weak| weak.strong_count() > 0))
            .map(|(digest, _)| digest.clone())
            .collect()
    }

    /// How many digests are loaded now.
    #[cfg(test)]
    fn loaded(&self) -> usize {
        let map = self.by_digest.lock();
        map.values()
            .filter(|slot| slot.lock().strong_count() > 0)
            .count()
    }
}

/// A counting semaphore for compiles, taken from blocking threads.
pub struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    fn new(count: usize) -> Self {
        Slots {
            free: Mutex::new(count),
            freed: Condvar::new(),
        }
    }

    /// Wait for a free slot; it is given back when the guard drops.
    pub fn take(&self) -> SlotGuard<'_> {
        let mut free = self.free.lock();
        while *free == 0 {
            self.freed.wait(&mut free);
        }
        *free -= 1;
        SlotGuard { slots: self }
    }
}

/// A compile slot, held while compiling.
pub struct SlotGuard<'a> {
    slots: &'a Slots,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        *self.slots.free.lock() += 1;
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn component() -> Component {
        let engine = wasmtime::Engine::default();
        // `(component)`: magic, version 0xd, layer 1.
        Component::new(&engine, b"\0asm\x0d\0\x01\0").expect("empty component")
    }

    #[test]
    fn one_digest_is_made_once_while_loaded_and_again_once_dropped() {
        let components = Components::new(1);
        let made = AtomicUsize::new(0);
        let make = |_: &Slots| -> Result<(Component, ()), ()> {
            made.fetch_add(1, Ordering::SeqCst);
            Ok((component(), ()))
        };
        let (first, made_now) = components.get_or_make("a", make).unwrap();
        assert!(made_now.is_some());
        let (second, made_now) = components.get_or_make("a", make).unwrap();
        assert!(made_now.is_none() && Arc::ptr_eq(&first, &second));
        let (_other, made_now) = components.get_or_make("b", make).unwrap();
        assert!(made_now.is_some());
        assert_eq!((made.load(Ordering::SeqCst), components.loaded()), (2, 2));
        drop((first, second));
        assert_eq!(components.loaded(), 1, "a digest nobody uses is let go");
        let (_again, made_now) = components.get_or_make("a", make).unwrap();
        assert!(made_now.is_some());
        assert_eq!(made.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_failed_make_shares_nothing() {
        let components = Components::new(1);
        assert!(components.get_or_make::<(), _>("a", |_| Err("no")).is_err());
        let (_, made_now) = components
            .get_or_make("a", |_| Ok::<_, ()>((component(), ())))
            .unwrap();
        assert!(made_now.is_some());
    }

    #[test]
    fn compiles_beyond_the_bound_wait_for_a_slot() {
        let components = Arc::new(Components::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let (components, running, peak) =
                    (components.clone(), running.clone(), peak.clone());
                std::thread::spawn(move || {
                    components
                        .get_or_make(&format!("d{i}"), |slots| {
                            let _slot = slots.take();
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(30));
                            running.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, ()>((component(), ()))
                        })
                        .map(|(c, _)| c)
                })
            })
            .collect();
        let held: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(held.len(), 6);
        assert_eq!(peak.load(Ordering::SeqCst), 2);
    }
}
