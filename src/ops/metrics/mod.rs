//! Metrics registry and Prometheus text exposition (format 0.0.4).
//!
//! Contract: nothing on the hot path touches the registry. Subsystems keep
//! their own stats structs of atomics (Relaxed) and, at start-up, register
//! *readers* here: an `Arc<AtomicU64>`, a closure, a histogram snapshot
//! function, or a [`Collect`] implementation. A scrape runs every reader on
//! the ops thread, so `/metrics` shows the values of that instant. A scrape
//! allocates (it builds the response text); registration allocates; the
//! subsystems' counters never do.
//!
//! Families are documented in [`catalogue`]; a sample for an unknown family,
//! with the wrong type or with the wrong label names is refused — at
//! registration with an [`OpsError`], at scrape time (from a [`Collect`]) by
//! dropping the sample and counting it in
//! `pricewire_metrics_rejected_samples_total`. Two samples with the same
//! labels in one family keep the first and count the second the same way.
//!
//! The text is produced by the `prometheus-client` crate's Prometheus text
//! encoder through one custom `Collector` that walks the families, which is
//! how that crate supports values read from existing atomics at scrape time.

pub mod catalogue;
mod histogram;
pub mod renamed;

pub use catalogue::{FamilyDesc, MetricKind, FAMILIES};
pub use histogram::{HistogramSnapshot, SharedHistogram, LATENCY_BUCKETS_S};

use crate::ops::OpsError;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `Content-Type` of the `/metrics` answer.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A subsystem's stats, read at scrape time. Implement this on the stats
/// struct (of atomics) and register it once with [`Registry::register_collect`];
/// `collect` writes the current value of every series it owns into the sink.
/// It runs on the ops thread and must not block on the hot path's behalf
/// (read atomics, take a cold-path lock at most).
pub trait Collect: Send + Sync + 'static {
    /// Writes the current value of every series this source owns.
    fn collect(&self, sink: &mut Sink);
}

/// One series as the readers behind `/metrics` give it at this instant
/// ([`Registry::series`]): what the status line and the generated metrics
/// catalogue read, so neither can disagree with a scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The family's exposition name (one of the catalogue's).
    pub family: &'static str,
    /// The family's type.
    pub kind: MetricKind,
    /// Label names and values, in the family's documented order.
    pub labels: Vec<(&'static str, String)>,
    /// A counter's or gauge's value; a histogram's count.
    pub value: f64,
}

impl Series {
    /// The value of label `name` ("" if the family has no such label).
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The sum of `family`'s series that pass `keep`.
pub(crate) fn sum_of(series: &[Series], family: &str, keep: impl Fn(&Series) -> bool) -> f64 {
    series
        .iter()
        .filter(|s| s.family == family && keep(s))
        .map(|s| s.value)
        .sum()
}

/// Label names and values of one series, in the family's documented order.
type LabelSet = Vec<(&'static str, String)>;

#[derive(Debug, Clone)]
enum SampleValue {
    Counter(u64),
    Gauge(f64),
    GaugeInt(i64),
    Histogram(HistogramSnapshot),
}

#[derive(Debug, Clone)]
struct Sample {
    labels: LabelSet,
    value: SampleValue,
}

/// Where collectors write samples during one scrape.
pub struct Sink {
    families: Vec<FamilyDesc>,
    samples: Vec<Vec<Sample>>,
    rejected: u64,
}

impl Sink {
    /// Each renamed family's samples also under its old name, in its old
    /// unit ([`catalogue::DEPRECATED`]), so a scrape shows both.
    fn alias_deprecated(&mut self) {
        let at = |name: &str| self.families.iter().position(|f| f.name == name);
        for r in catalogue::DEPRECATED {
            let (Some(o), Some(n)) = (at(r.old), at(r.new)) else {
                continue;
            };
            let mut samples = self.samples[n].clone();
            for s in samples.iter_mut().filter(|_| r.scale != 1.0) {
                match &mut s.value {
                    SampleValue::Gauge(v) => *v = (*v * r.scale).round(),
                    SampleValue::GaugeInt(v) => *v = (*v as f64 * r.scale).round() as i64,
                    // Only gauges change unit; a scaled counter would not be one.
                    SampleValue::Counter(_) | SampleValue::Histogram(_) => {}
                }
            }
            self.samples[o] = samples;
        }
    }

    fn new(families: Vec<FamilyDesc>) -> Self {
        let samples = families.iter().map(|_| Vec::new()).collect();
        Sink {
            families,
            samples,
            rejected: 0,
        }
    }

    /// Current value of a counter series.
    pub fn counter(&mut self, family: &str, labels: &[(&str, &str)], value: u64) {
        self.push(
            family,
            MetricKind::Counter,
            labels,
            SampleValue::Counter(value),
        );
    }

    /// Current value of a gauge series.
    pub fn gauge(&mut self, family: &str, labels: &[(&str, &str)], value: f64) {
        self.push(family, MetricKind::Gauge, labels, SampleValue::Gauge(value));
    }

    /// Current value of an integer gauge series (printed without a fraction).
    pub(crate) fn gauge_i64(&mut self, family: &str, labels: &[(&str, &str)], value: i64) {
        self.push(
            family,
            MetricKind::Gauge,
            labels,
            SampleValue::GaugeInt(value),
        );
    }

    /// Current state of a histogram series.
    pub fn histogram(&mut self, family: &str, labels: &[(&str, &str)], snap: &HistogramSnapshot) {
        let value = SampleValue::Histogram(snap.clone());
        self.push(family, MetricKind::Histogram, labels, value);
    }

    /// Samples refused so far in this scrape.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    fn push(&mut self, family: &str, kind: MetricKind, labels: &[(&str, &str)], v: SampleValue) {
        let checked = self
            .families
            .iter()
            .position(|f| f.name == family)
            .ok_or(())
            .and_then(|i| check_sample(&self.families[i], kind, labels).map(|l| (i, l)));
        let Ok((index, labels)) = checked else {
            self.reject(family);
            return;
        };
        if self.samples[index].iter().any(|s| s.labels == labels) {
            self.reject(family);
            return;
        }
        self.samples[index].push(Sample { labels, value: v });
    }

    #[cold]
    fn reject(&mut self, family: &str) {
        self.rejected += 1;
        tracing::warn!(
            family,
            "metrics sample refused: unknown family, wrong type or labels, or duplicate series"
        );
    }
}

/// Checks kind and label names against the family; returns the labels in
/// documented order.
fn check_sample(f: &FamilyDesc, kind: MetricKind, labels: &[(&str, &str)]) -> Result<LabelSet, ()> {
    if f.kind != kind || f.labels.len() != labels.len() {
        return Err(());
    }
    f.labels
        .iter()
        .map(|name| {
            let mut hits = labels.iter().filter(|(k, _)| k == name);
            match (hits.next(), hits.next()) {
                (Some((_, v)), None) => Ok((*name, (*v).to_string())),
                _ => Err(()),
            }
        })
        .collect()
}

/// How a registered reader gets its value.
enum Reader {
    CounterAtomic(Arc<AtomicU64>),
    CounterFn(Box<dyn Fn() -> u64 + Send + Sync>),
    GaugeU64(Arc<AtomicU64>),
    GaugeI64(Arc<AtomicI64>),
    GaugeFn(Box<dyn Fn() -> f64 + Send + Sync>),
    HistogramFn(Box<dyn Fn() -> HistogramSnapshot + Send + Sync>),
}

struct ReaderSource {
    family: &'static str,
    labels: Vec<(&'static str, String)>,
    reader: Reader,
}

/// `pricewire_thread_rt_priority`: the real-time priority of every
/// pipeline thread (`pw-*`), read from `/proc/self/task` at scrape time, so
/// it shows what the kernel applies now (`--rt-priority`, or a `chrt` from
/// outside), not what was asked for.
struct ThreadPriorities;

impl Collect for ThreadPriorities {
    fn collect(&self, sink: &mut Sink) {
        let task_dir = std::path::Path::new("/proc/self/task");
        for (name, _policy, priority) in crate::runtime::affinity::thread_schedules(task_dir) {
            if name.starts_with("pw-") {
                sink.gauge_i64(
                    catalogue::THREAD_RT_PRIORITY,
                    &[("thread", &name)],
                    priority,
                );
            }
        }
    }
}

impl Collect for ReaderSource {
    fn collect(&self, sink: &mut Sink) {
        let labels: Vec<(&str, &str)> = self.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        match &self.reader {
            Reader::CounterAtomic(a) => {
                sink.counter(self.family, &labels, a.load(Ordering::Relaxed))
            }
            Reader::CounterFn(f) => sink.counter(self.family, &labels, f()),
            Reader::GaugeU64(a) => {
                let v = i64::try_from(a.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
                sink.gauge_i64(self.family, &labels, v)
            }
            Reader::GaugeI64(a) => sink.gauge_i64(self.family, &labels, a.load(Ordering::Relaxed)),
            Reader::GaugeFn(f) => sink.gauge(self.family, &labels, f()),
            Reader::HistogramFn(f) => sink.histogram(self.family, &labels, &f()),
        }
    }
}

struct Inner {
    families: Mutex<Vec<FamilyDesc>>,
    sources: Mutex<Vec<Arc<dyn Collect>>>,
    rejected_samples: AtomicU64,
    /// Series registered through the `register_*` readers, to refuse a
    /// duplicate at start-up rather than at every scrape.
    registered_series: Mutex<Vec<(&'static str, LabelSet)>>,
}

/// The process-wide registry. Cheap to clone (shared `Arc`); every method
/// takes `&self`, so subsystems register from wherever they start.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these cold-path locks cannot leave the
    // vectors half-updated (each push is one call), so poison is ignored.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    /// A registry that knows every documented family ([`FAMILIES`]) and
    /// already exposes its own `pricewire_metrics_rejected_samples_total`
    /// and `pricewire_build_info`.
    pub fn new() -> Self {
        let registry = Registry {
            inner: Arc::new(Inner {
                families: Mutex::new(FAMILIES.to_vec()),
                sources: Mutex::new(Vec::new()),
                rejected_samples: AtomicU64::new(0),
                registered_series: Mutex::new(Vec::new()),
            }),
        };
        let version = env!("CARGO_PKG_VERSION");
        registry.register_collect(Arc::new(ReaderSource {
            family: catalogue::BUILD_INFO,
            labels: vec![("version", version.to_string())],
            reader: Reader::GaugeFn(Box::new(|| 1.0)),
        }));
        registry.register_collect(Arc::new(ThreadPriorities));
        registry
    }

    /// Adds a family that is not in the standard catalogue (checked against
    /// the naming conventions). Prefer adding it to [`catalogue::FAMILIES`]
    /// so it is documented.
    pub(crate) fn define(&self, desc: FamilyDesc) -> Result<(), OpsError> {
        catalogue::check_conventions(&desc).map_err(OpsError::Naming)?;
        let mut families = lock(&self.inner.families);
        if families.iter().any(|f| f.name == desc.name) {
            return Err(OpsError::Metric(format!(
                "{}: family already defined",
                desc.name
            )));
        }
        families.push(desc);
        Ok(())
    }

    /// Registers a subsystem's collector; it runs on every scrape.
    pub fn register_collect(&self, source: Arc<dyn Collect>) {
        lock(&self.inner.sources).push(source);
    }

    /// A counter series read from an atomic the subsystem increments.
    pub fn register_counter(
        &self,
        family: &str,
        labels: &[(&str, &str)],
        value: Arc<AtomicU64>,
    ) -> Result<(), OpsError> {
        self.register_reader(
            family,
            MetricKind::Counter,
            labels,
            Reader::CounterAtomic(value),
        )
    }

    /// A counter series computed at scrape time (e.g. a sum over shards).
    pub fn register_counter_fn(
        &self,
        family: &str,
        labels: &[(&str, &str)],
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Result<(), OpsError> {
        self.register_reader(
            family,
            MetricKind::Counter,
            labels,
            Reader::CounterFn(Box::new(read)),
        )
    }

    /// A gauge series read from an unsigned atomic (occupancy, depth).
    pub fn register_gauge(
        &self,
        family: &str,
        labels: &[(&str, &str)],
        value: Arc<AtomicU64>,
    ) -> Result<(), OpsError> {
        self.register_reader(family, MetricKind::Gauge, labels, Reader::GaugeU64(value))
    }

    /// A gauge series read from a signed atomic.
    pub fn register_gauge_i64(
        &self,
        family: &str,
        labels: &[(&str, &str)],
        value: Arc<AtomicI64>,
    ) -> Result<(), OpsError> {
        self.register_reader(family, MetricKind::Gauge, labels, Reader::GaugeI64(value))
    }

    /// A gauge series computed at scrape time (ratios, ages in seconds).
    pub fn register_gauge_fn(
        &self,
        family: &str,
        labels: &[(&str, &str)],
        read: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Result<(), OpsError> {
        self.register_reader(
            family,
            MetricKind::Gauge,
            labels,
            Reader::GaugeFn(Box::new(read)),
        )
    }

    /// A histogram series from a snapshot function, e.g.
    /// `move || HistogramSnapshot::from_hdr(&shared.lock(), LATENCY_BUCKETS_S, 1e-9)`.
    pub fn register_histogram_fn(
        &self,
        family: &str,
        labels: &[(&str, &str)],
        snapshot: impl Fn() -> HistogramSnapshot + Send + Sync + 'static,
    ) -> Result<(), OpsError> {
        let reader = Reader::HistogramFn(Box::new(snapshot));
        self.register_reader(family, MetricKind::Histogram, labels, reader)
    }

    /// A histogram series read from a [`SharedHistogram`] of values in
    /// nanoseconds, exposed in seconds at the given bucket bounds.
    pub(crate) fn register_hdr_ns(
        &self,
        family: &str,
        labels: &[(&str, &str)],
        shared: Arc<SharedHistogram>,
        bounds_s: &'static [f64],
    ) -> Result<(), OpsError> {
        self.register_histogram_fn(family, labels, move || shared.snapshot(bounds_s, 1e-9))
    }

    /// Families the registry fills itself; registrations for them are refused.
    pub const OWN_FAMILIES: [&'static str; 3] = [
        catalogue::METRICS_REJECTED_SAMPLES,
        catalogue::BUILD_INFO,
        catalogue::THREAD_RT_PRIORITY,
    ];

    fn register_reader(
        &self,
        family: &str,
        kind: MetricKind,
        labels: &[(&str, &str)],
        reader: Reader,
    ) -> Result<(), OpsError> {
        if Self::OWN_FAMILIES.contains(&family) {
            return Err(OpsError::Metric(format!("{family}: owned by the registry")));
        }
        let desc = lock(&self.inner.families)
            .iter()
            .find(|f| f.name == family)
            .copied()
            .ok_or_else(|| OpsError::Metric(format!("{family}: not a documented family")))?;
        let labels = check_sample(&desc, kind, labels).map_err(|()| {
            OpsError::Metric(format!(
                "{family}: expected a {} with labels {:?}",
                desc.kind.as_str(),
                desc.labels
            ))
        })?;
        let mut series = lock(&self.inner.registered_series);
        if series.iter().any(|(f, l)| *f == desc.name && *l == labels) {
            return Err(OpsError::Metric(format!(
                "{family}{labels:?}: series already registered"
            )));
        }
        series.push((desc.name, labels.clone()));
        drop(series);
        self.register_collect(Arc::new(ReaderSource {
            family: desc.name,
            labels,
            reader,
        }));
        Ok(())
    }

    /// Samples refused at scrape time since start (also exposed as a metric).
    pub fn rejected_samples(&self) -> u64 {
        self.inner.rejected_samples.load(Ordering::Relaxed)
    }

    /// Every registered series with its current value, read by the same
    /// readers as [`Registry::scrape`].
    pub fn series(&self) -> Vec<Series> {
        let sink = self.collect_all();
        let mut out = Vec::new();
        for (f, samples) in sink.families.iter().zip(&sink.samples) {
            for s in samples {
                let value = match &s.value {
                    SampleValue::Counter(v) => *v as f64,
                    SampleValue::Gauge(v) => *v,
                    SampleValue::GaugeInt(v) => *v as f64,
                    SampleValue::Histogram(h) => h.count as f64,
                };
                out.push(Series {
                    family: f.name,
                    kind: f.kind,
                    labels: s.labels.clone(),
                    value,
                });
            }
        }
        out
    }

    fn collect_all(&self) -> Sink {
        let families = lock(&self.inner.families).clone();
        let sources = lock(&self.inner.sources).clone();
        let mut sink = Sink::new(families);
        for source in &sources {
            source.collect(&mut sink);
        }
        sink.alias_deprecated();
        sink
    }

    /// Runs every collector and returns the Prometheus text exposition.
    /// Families without samples are left out.
    pub fn scrape(&self) -> String {
        let mut sink = self.collect_all();
        // Written last, so it includes this scrape's own refusals; a
        // collector's sample for this family is itself a refusal.
        if let Some(i) = sink
            .families
            .iter()
            .position(|f| f.name == catalogue::METRICS_REJECTED_SAMPLES)
        {
            sink.rejected += sink.samples[i].len() as u64;
            sink.samples[i].clear();
        }
        let rejected = self
            .inner
            .rejected_samples
            .fetch_add(sink.rejected, Ordering::Relaxed)
            + sink.rejected;
        sink.counter(catalogue::METRICS_REJECTED_SAMPLES, &[], rejected);
        let mut encoder_registry = prometheus_client::registry::Registry::default();
        encoder_registry.register_collector(Box::new(Scraped(sink)));
        let mut text = String::with_capacity(16 * 1024);
        prometheus_client::encoding::prometheus_text::encode(&mut text, &encoder_registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// One scrape's samples, handed to the encoder as a custom collector.
struct Scraped(Sink);

impl std::fmt::Debug for Scraped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scraped")
    }
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (family, samples) in self.0.families.iter().zip(&self.0.samples) {
            if samples.is_empty() {
                continue;
            }
            // The encoder appends `_total` to counters itself.
            let (name, kind) = match family.kind {
                MetricKind::Counter => {
                    (family.name.trim_end_matches("_total"), MetricType::Counter)
                }
                MetricKind::Gauge => (family.name, MetricType::Gauge),
                MetricKind::Histogram => (family.name, MetricType::Histogram),
            };
            let mut metric = encoder.encode_descriptor(name, family.help, None, kind)?;
            for sample in samples {
                let mut series = metric.encode_family(&sample.labels)?;
                match &sample.value {
                    SampleValue::Counter(v) => {
                        series.encode_counter::<NoLabelSet, _, u64>(v, None)?
                    }
                    SampleValue::Gauge(v) => series.encode_gauge(v)?,
                    SampleValue::GaugeInt(v) => series.encode_gauge(v)?,
                    SampleValue::Histogram(h) => series.encode_histogram::<NoLabelSet>(
                        h.sum,
                        h.count,
                        &h.per_bucket(),
                        None,
                    )?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
