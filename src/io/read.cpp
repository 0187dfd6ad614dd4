// Exposures from FITS files: layout detection, planes, masks, epochs, PSFs and WCS.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "io/fits_util.hpp"
#include "io/read_internal.hpp"
#include "io/workunit.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/synth.hpp"

namespace shiftstack::io {

using detail::FitsFile;
using detail::Header;

std::vector<std::string> ReadOptions::default_flag_keys() {
  // KBMOD's Rubin (butler) defaults, plus INTRP: interpolated pixels carry no real signal.
  return {"BAD", "CLIPPED", "CR", "CROSSTALK", "EDGE", "INTRP", "NO_DATA", "SAT", "SENSOR_EDGE", "SUSPECT"};
}

// ---- one exposure -------------------------------------------------------------------------

namespace {

struct RawExposure {
  Exposure exposure;
  ExposureInfo info;
  std::optional<Wcs> wcs;
  double curve_x = 0, curve_y = 0;
  double masked_fraction = 0;
  std::shared_ptr<const detail::WorkUnitMeta> workunit;  // null for plain files
  std::vector<OriginalFrame> originals;                 // reprojected WorkUnits: the images behind it
  std::vector<std::string> warnings;
};

// LSST/Rubin mask plane numbers, used when a mask HDU declares no MP_* keywords (KBMOD does
// the same with its default mask_bits_dict).
const std::map<std::string, int>& default_mask_planes() {
  static const std::map<std::string, int> planes = {
      {"BAD", 0},     {"SAT", 1},       {"INTRP", 2},       {"CR", 3},
      {"EDGE", 4},    {"DETECTED", 5},  {"DETECTED_NEGATIVE", 6}, {"SUSPECT", 7},
      {"NO_DATA", 8}, {"CLIPPED", 9},   {"CROSSTALK", 10},  {"INEXACT_PSF", 11},
      {"NOT_DEBLENDED", 12}, {"REJECTED", 13}, {"SENSOR_EDGE", 14}, {"UNMASKEDNAN", 15}};
  return planes;
}

// Bits to reject, from MP_<NAME> = bit keywords and the configured names.
std::uint64_t rejected_bits(const Header& mask_header, const Header& primary, const ReadOptions& o,
                            std::string& description) {
  if (o.mask_kind == MaskKind::bitmask) {
    std::ostringstream s;
    s << "integer codes, reject bits 0x" << std::hex << o.mask_bitmask;
    description = s.str();
    return o.mask_bitmask;
  }
  std::map<std::string, int> planes;
  for (const Header* h : {&mask_header, &primary})
    for (const auto& [key, value] : h->cards)
      if (key.rfind("MP_", 0) == 0 && !planes.count(key.substr(3))) {
        const auto bit = h->number(key);
        if (!bit || *bit < 0 || *bit > 63 || *bit != std::floor(*bit))
          throw Error("mask plane keyword " + key + " = " + value + " is not a bit number 0..63");
        planes[key.substr(3)] = int(*bit);
      }
  const bool declared = !planes.empty();
  if (!declared) planes = default_mask_planes();
  std::uint64_t bits = 0;
  std::string used;
  for (const auto& name : o.flag_keys) {
    const auto it = planes.find(name);
    if (it == planes.end()) continue;  // a plane this file does not define cannot be set
    bits |= std::uint64_t(1) << it->second;
    used += (used.empty() ? "" : ",") + name;
  }
  description = "planes " + (used.empty() ? std::string("(none of flag_keys present)") : used) +
                (declared ? " (MP_* keywords)" : " (default plane numbers: no MP_* keywords)");
  return bits;
}

Image<float> read_psf(const FitsFile& file, const Header& header, const std::string& what) {
  Image<float> psf = detail::read_float_image(file, header, what);
  // The likelihood correlates every pixel with the kernel: a kernel the size of the image would
  // make that a run of hours. Real PSFs are tens of pixels across.
  constexpr int max_psf_side = 255;
  if (psf.width > max_psf_side || psf.height > max_psf_side)
    throw Error(file.path() + ": " + what + " is " + std::to_string(psf.width) + "x" + std::to_string(psf.height) +
                "; a PSF kernel may be at most " + std::to_string(max_psf_side) + " pixels on a side");
  if (psf.width % 2 == 0 || psf.height % 2 == 0)
    throw Error(file.path() + ": " + what + " is " + std::to_string(psf.width) + "x" +
                std::to_string(psf.height) + "; a PSF kernel must have odd sides (centred on its middle pixel)");
  double sum = 0;
  for (float v : psf.pixels) {
    if (!std::isfinite(v)) throw Error(file.path() + ": " + what + " has a non-finite value");
    sum += v;
  }
  if (!(sum > 0)) throw Error(file.path() + ": " + what + " sums to " + std::to_string(sum) + "; expected > 0");
  // Kernels stored in float sum to 1 within rounding; rescale only real departures so that a
  // kernel written from memory reads back bit for bit.
  constexpr double normalization_tolerance = 1e-5;
  if (std::abs(sum - 1) > normalization_tolerance)
    for (float& v : psf.pixels) v = float(v / sum);
  return psf;
}

// Combines the planes of one exposure into an Exposure, masking what cannot be used.
RawExposure assemble(const std::string& label, Image<float> science, Image<float> variance,
                     const std::vector<long long>* mask_codes, long mask_width, long mask_height,
                     std::uint64_t reject, const ReadOptions& o) {
  auto shape = [](long w, long h) { return std::to_string(w) + "x" + std::to_string(h); };
  if (variance.width != science.width || variance.height != science.height)
    throw Error(label + ": variance plane is " + shape(variance.width, variance.height) +
                " but the science plane is " + shape(science.width, science.height));
  if (mask_codes && (mask_width != science.width || mask_height != science.height))
    throw Error(label + ": mask plane is " + shape(mask_width, mask_height) +
                " but the science plane is " + shape(science.width, science.height));
  RawExposure raw;
  Exposure& x = raw.exposure;
  x.label = label;
  const std::size_t n = science.size();
  x.mask = detail::fresh_image<std::uint8_t>(science.width, science.height);
  std::int64_t masked = 0, nonfinite = 0, finite_science = 0, usable_variance = 0;
  for (std::size_t p = 0; p < n; ++p) {
    float& s = science.pixels[p];
    float& v = variance.pixels[p];
    switch (o.variance_kind) {
      case VarianceKind::variance: break;
      case VarianceKind::sigma: v = v * v; break;
      case VarianceKind::weight: v = v > 0 ? 1.0f / v : std::numeric_limits<float>::quiet_NaN(); break;
    }
    const bool science_ok = std::isfinite(s);
    const bool variance_ok = std::isfinite(v) && v > 0;
    finite_science += science_ok;
    usable_variance += variance_ok;
    if (mask_codes && (std::uint64_t((*mask_codes)[p]) & reject)) {
      x.mask.pixels[p] = 1;
      ++masked;
    } else if (!science_ok || !variance_ok) {
      x.mask.pixels[p] = 1;
      ++nonfinite;
    }
    // Non-finite values are replaced so no later arithmetic sees them; the mask carries them.
    if (!science_ok) s = 0;
    if (!variance_ok) v = 1;
  }
  if (finite_science == 0) throw Error(label + ": science plane has no finite values (all NaN/inf)");
  if (usable_variance == 0) {
    const char* plane = o.variance_kind == VarianceKind::sigma    ? "sigma"
                        : o.variance_kind == VarianceKind::weight ? "weight"
                                                                  : "variance";
    throw Error(label + ": " + plane + " plane has no usable values (none finite and > 0)");
  }
  x.science = std::move(science);
  x.variance = std::move(variance);
  raw.info.masked_pixels = masked;
  raw.info.nonfinite_pixels = nonfinite;
  raw.masked_fraction = double(masked + nonfinite) / double(n);
  return raw;
}

// Per-exposure header values: epoch, throughput, common curve, WCS.
void read_metadata(RawExposure& raw, const Header& hdu, const Header& primary, const ReadOptions& o) {
  const std::string& label = raw.exposure.label;
  const detail::EpochReading epoch = detail::read_epoch(hdu, primary, o.epoch_keyword, label);
  raw.exposure.epoch = epoch.mjd;
  raw.info.epoch = epoch.mjd;
  raw.info.epoch_keyword = epoch.keyword;
  auto number = [&](const std::string& key) -> std::optional<double> {
    if (key.empty()) return std::nullopt;
    try {
      if (auto v = hdu.number(key)) return v;
      return primary.number(key);
    } catch (const Error& e) {
      throw Error(label + ": " + e.what());
    }
  };
  raw.exposure.throughput = number(o.throughput_keyword).value_or(1.0);
  if (!(std::isfinite(raw.exposure.throughput) && raw.exposure.throughput > 0))
    throw Error(label + ": " + o.throughput_keyword + " = " + std::to_string(raw.exposure.throughput) +
                "; a throughput must be finite and > 0");
  raw.info.throughput = raw.exposure.throughput;
  raw.curve_x = number(o.curve_keywords[0]).value_or(0.0);
  raw.curve_y = number(o.curve_keywords[1]).value_or(0.0);
  if (!std::isfinite(raw.curve_x) || !std::isfinite(raw.curve_y))
    throw Error(label + ": common-curve offset keywords are not finite");
  raw.wcs = Wcs::from_header(hdu.raw, label);
  if (!raw.wcs) raw.wcs = Wcs::from_header(primary.raw, label + " (primary header)");
  raw.info.has_wcs = bool(raw.wcs);
}

void set_psf(RawExposure& raw, std::optional<Image<float>> kernel, const std::string& source,
             const ReadOptions& o) {
  if (kernel) {
    raw.info.psf = "kernel " + source + " " + std::to_string(kernel->width) + "x" + std::to_string(kernel->height);
    raw.exposure.psf = std::move(*kernel);
  } else {
    raw.exposure.psf = gaussian_psf(o.psf_sigma);
    std::ostringstream s;
    s << "gaussian sigma " << o.psf_sigma << " px (psf_val)";
    raw.info.psf = s.str();
  }
}

// The kernel of the file's psf_hdu (config key) when it has one, else the Gaussian of psf_val.
void set_psf_from_hdu(FitsFile& file, RawExposure& raw, const ReadOptions& o) {
  std::optional<Image<float>> kernel;
  if (!o.psf_hdu.empty() && file.move_to_name(o.psf_hdu)) {
    const Header psf_header = Header::read(file);
    kernel = read_psf(file, psf_header, "PSF HDU " + o.psf_hdu);
  }
  set_psf(raw, std::move(kernel), o.psf_hdu, o);
}

std::string extname_of(const Header& h) { return h.text("EXTNAME").value_or(""); }

using detail::single_image_hdu;
RawExposure read_single(FitsFile& file, const Header& primary, int hdu, const ReadOptions& o);

// Rubin/KBMOD layout: one exposure per file.
RawExposure read_rubin(FitsFile& file, const Header& primary, const ReadOptions& o) {
  const std::string& path = file.path();
  const int hdus = file.hdu_count();
  int science_hdu = 0, mask_hdu = 0, variance_hdu = 0;
  std::string names;
  if (file.move_to_name(o.science_hdu)) {
    science_hdu = file.current_hdu();
    if (file.move_to_name(o.variance_hdu)) variance_hdu = file.current_hdu();
    if (file.move_to_name(o.mask_hdu)) mask_hdu = file.current_hdu();
    if (!variance_hdu && o.single_image_variance) return read_single(file, primary, science_hdu, o);
    if (!variance_hdu)
      throw Error(path + ": has a " + o.science_hdu + " HDU but no HDU named " + o.variance_hdu +
                  " (config variance_hdu); a search needs the noise of every pixel: name the plane with "
                  "variance_hdu, or set single_image_variance (estimate or a value)");
    names = o.science_hdu + "," + (mask_hdu ? o.mask_hdu : std::string("(no mask)")) + "," + o.variance_hdu;
  } else {
    // Positional: HDUs 1, 2, 3 are science, mask, variance, but only when they are unnamed;
    // named HDUs that match nothing configured are more likely a different layout.
    std::vector<std::string> found;
    for (int h = 2; h <= hdus; ++h) {
      file.move_to(h);
      found.push_back(extname_of(Header::read(file)));
    }
    const bool unnamed = hdus >= 4 && found[0].empty() && found[1].empty() && found[2].empty();
    if (!unnamed && o.layout == Layout::automatic) {
      if (const int single = single_image_hdu(file)) return read_single(file, primary, single, o);
    }
    if (!unnamed) {
      std::string listing;
      for (std::size_t i = 0; i < found.size(); ++i)
        listing += (i ? ", " : "") + std::to_string(i + 1) + ":" + (found[i].empty() ? "(unnamed)" : found[i]);
      throw Error(path + ": no HDU named " + o.science_hdu + " and HDUs 1-3 are not an unnamed science, mask, " +
                  "variance triple (found " + std::to_string(hdus) + " HDUs" +
                  (listing.empty() ? "" : ": " + listing) +
                  "); set science_hdu, mask_hdu and variance_hdu in the config");
    }
    science_hdu = 2;
    mask_hdu = 3;
    variance_hdu = 4;
    names = "HDU1,HDU2,HDU3";
  }

  file.move_to(science_hdu);
  const Header science_header = Header::read(file);
  const std::string label = path;
  Image<float> science = detail::read_float_image(file, science_header, "science plane");
  file.move_to(variance_hdu);
  const Header variance_header = Header::read(file);
  Image<float> variance = detail::read_float_image(file, variance_header, "variance plane");
  // One code buffer per thread, reused from file to file (see read_integer_image).
  thread_local std::vector<long long> codes;
  long mw = 0, mh = 0;
  std::uint64_t reject = 0;
  std::string mask_description = "none (no mask plane)";
  if (mask_hdu) {
    file.move_to(mask_hdu);
    const Header mask_header = Header::read(file);
    detail::read_integer_image(file, mask_header, "mask plane", codes, mw, mh);
    try {
      reject = rejected_bits(mask_header, primary, o, mask_description);
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
  }
  RawExposure raw = assemble(label, std::move(science), std::move(variance), mask_hdu ? &codes : nullptr,
                             mw, mh, reject, o);
  raw.info.file = path;
  raw.info.hdus = names;
  raw.info.mask = mask_description;
  raw.info.variance = "plane " + (names == "HDU1,HDU2,HDU3" ? std::string("HDU3") : o.variance_hdu);
  read_metadata(raw, science_header, primary, o);

  set_psf_from_hdu(file, raw, o);
  return raw;
}

// KBMOD WorkUnit: SCI_i, VAR_i, MSK_i, PSF_i for i = 0, 1, ... (all of them, or the one image of
// a shard whose primary file's metadata is `shared`).
std::vector<RawExposure> read_workunit(FitsFile& file, const Header& primary, const ReadOptions& o,
                                       std::shared_ptr<const detail::WorkUnitMeta> shared, int shard_index) {
  const std::string& path = file.path();
  if (!shared) shared = std::make_shared<detail::WorkUnitMeta>(detail::read_workunit_meta(file, primary));
  const detail::WorkUnitMeta& meta = *shared;
  std::vector<int> indices;
  if (shard_index >= 0) {
    indices = {shard_index};
  } else if (meta.images >= 1) {
    for (int i = 0; i < meta.images; ++i) indices.push_back(i);
  } else {
    // No image count (a shard given on its own, or an old WorkUnit): every SCI_<i> present.
    for (int h = 2; h <= file.hdu_count(); ++h) {
      file.move_to(h);
      const std::string name = extname_of(Header::read(file));
      if (name.size() > 4 && name.rfind("SCI_", 0) == 0 &&
          std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; }) && name.size() < 12)
        indices.push_back(std::stoi(name.substr(4)));
    }
    std::sort(indices.begin(), indices.end());
    if (indices.empty()) throw Error(path + ": a WorkUnit without NUMIMG and without SCI_<i> image HDUs");
  }
  std::vector<RawExposure> out;
  for (int i : indices) {
    const std::string index = std::to_string(i);
    const std::string label = path + "[SCI_" + index + "]";
    if (!file.move_to_name("SCI_" + index))
      throw Error(path + ": WorkUnit has no HDU SCI_" + index +
                  (meta.images >= 1 ? " (NUMIMG = " + std::to_string(meta.images) + " in " + meta.primary_path + ")" : ""));
    const Header science_header = Header::read(file);
    Image<float> science = detail::read_float_image(file, science_header, "SCI_" + index);
    if (!file.move_to_name("VAR_" + index)) throw Error(path + ": WorkUnit has SCI_" + index + " but no VAR_" + index);
    const Header variance_header = Header::read(file);
    Image<float> variance = detail::read_float_image(file, variance_header, "VAR_" + index);
    thread_local std::vector<long long> codes;
    long mw = 0, mh = 0;
    const bool has_mask = file.move_to_name("MSK_" + index);
    if (has_mask) {
      const Header mask_header = Header::read(file);
      detail::read_integer_image(file, mask_header, "MSK_" + index, codes, mw, mh);
    }
    // WorkUnit masks are already binarized by KBMOD: any non-zero value rejects.
    RawExposure raw = assemble(label, std::move(science), std::move(variance), has_mask ? &codes : nullptr,
                               mw, mh, ~std::uint64_t(0), o);
    raw.info.file = path;
    raw.info.hdus = "SCI_" + index + "," + (has_mask ? "MSK_" + index : std::string("(no mask)")) + ",VAR_" + index;
    raw.info.mask = has_mask ? "binary (WorkUnit MSK_i: non-zero rejects)" : "none (no MSK_i)";
    raw.info.variance = "plane VAR_" + index;
    // A shard's own primary header is empty; the WorkUnit's is in its primary file.
    read_metadata(raw, science_header, shard_index >= 0 ? Header{} : primary, o);
    if (!raw.wcs && meta.global) raw.wcs = meta.global;
    raw.info.has_wcs = bool(raw.wcs);
    if (meta.frame == "ebd") {
      std::vector<int> constituents;
      try {
        constituents = detail::constituent_indices(science_header, i);
      } catch (const Error& e) {
        throw Error(label + ": " + e.what());
      }
      for (int j : constituents) {
        if (j >= int(meta.constituents.size())) {
          raw.originals.push_back(OriginalFrame{});  // no IMG_META row: positions cannot be mapped back
          continue;
        }
        raw.originals.push_back(meta.constituents[std::size_t(j)]);
      }
    }
    raw.workunit = shared;
    std::optional<Image<float>> kernel;
    if (file.move_to_name("PSF_" + index)) {
      const Header psf_header = Header::read(file);
      kernel = read_psf(file, psf_header, "PSF_" + index);
    }
    set_psf(raw, std::move(kernel), "PSF_" + index, o);
    out.push_back(std::move(raw));
  }
  return out;
}

// A file holding one image and no noise plane: a constant variance, estimated or given.
RawExposure read_single(FitsFile& file, const Header& primary, int hdu, const ReadOptions& o) {
  const std::string& path = file.path();
  if (!o.single_image_variance)
    throw Error(path + ": holds a single image (HDU " + std::to_string(hdu - 1) +
                ") and no variance plane; a search needs the noise of every pixel: set single_image_variance "
                "to estimate (a constant variance (1.4826 MAD)^2 from the image) or to a variance, or give files "
                "with science, mask and variance planes");
  file.move_to(hdu);
  const Header header = Header::read(file);
  Image<float> science = detail::read_float_image(file, header, "image");
  std::vector<std::string> warnings;
  std::string description;
  const double variance = detail::single_image_noise(science, *o.single_image_variance, path, description, warnings);
  Image<float> variance_plane(science.width, science.height, float(variance));
  RawExposure raw = assemble(path, std::move(science), std::move(variance_plane), nullptr, 0, 0, 0, o);
  raw.info.file = path;
  raw.info.hdus = "HDU" + std::to_string(hdu - 1) + " (single image)";
  raw.info.mask = "none (single image; non-finite pixels masked)";
  raw.info.variance = description;
  raw.warnings = std::move(warnings);
  read_metadata(raw, header, hdu == 1 ? Header{} : primary, o);
  set_psf_from_hdu(file, raw, o);
  return raw;
}

std::vector<RawExposure> read_file(const detail::WorkUnitPart& part, const ReadOptions& o) {
  FitsFile file = FitsFile::open_read(part.path);
  file.move_to(1);
  const Header primary = Header::read(file);
  std::vector<RawExposure> out;
  if (part.meta) {
    out = read_workunit(file, primary, o, part.meta, part.shard_index);
  } else if (o.layout == Layout::single) {
    const int hdu = single_image_hdu(file);
    if (!hdu) throw Error(part.path + ": layout single needs exactly one 2-D image HDU in each file");
    out.push_back(read_single(file, primary, hdu, o));
  } else if (o.layout == Layout::workunit || (o.layout == Layout::automatic && detail::is_workunit(file))) {
    out = read_workunit(file, primary, o, nullptr, -1);
  } else {
    out.push_back(read_rubin(file, primary, o));
  }
  file.close();
  return out;
}

}  // namespace

// ---- the stack ----------------------------------------------------------------------------

LoadedStack read_exposures(const std::vector<std::string>& files, const ReadOptions& o) {
  if (files.empty()) throw Error("no input files");
  if (!(o.psf_sigma > 0 && std::isfinite(o.psf_sigma)))
    throw Error("psf_val must be > 0, got " + std::to_string(o.psf_sigma));
  if (!(o.max_masked_fraction >= 0 && o.max_masked_fraction <= 1))
    throw Error("max_masked_pixels must be in [0, 1], got " + std::to_string(o.max_masked_fraction));
  // A sharded WorkUnit's primary file stands for its shard files.
  const std::vector<detail::WorkUnitPart> parts =
      o.layout == Layout::automatic || o.layout == Layout::workunit ? detail::resolve_workunit_shards(files)
                                                                    : [&] {
                                                                        std::vector<detail::WorkUnitPart> plain;
                                                                        for (const auto& f : files) plain.push_back({f, nullptr, -1});
                                                                        return plain;
                                                                      }();
  const int n = int(parts.size());
  std::vector<std::vector<RawExposure>> per_file(n);
  std::vector<std::string> errors(n);
  const int threads = o.threads > 0 ? o.threads : 0;
  std::atomic<int> files_done{0};

  // Different files in parallel; one file is never shared between threads (cfitsio shares a
  // handle's buffers between opens of the same file).
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads > 0 ? threads : omp_get_max_threads())
  for (int i = 0; i < n; ++i) {
    try {
      per_file[i] = read_file(parts[std::size_t(i)], o);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
    const int done = ++files_done;
    if (o.progress) {
#pragma omp critical(shiftstack_read_progress)
      o.progress(done, n);
    }
  }
  for (const auto& e : errors)
    if (!e.empty()) throw Error(e);

  LoadedStack loaded;
  std::vector<RawExposure> all;
  for (auto& list : per_file)
    for (auto& raw : list) {
      loaded.warnings.insert(loaded.warnings.end(), raw.warnings.begin(), raw.warnings.end());
      all.push_back(std::move(raw));
    }
  if (all.empty()) throw Error("the inputs hold no exposures");

  // A reprojected WorkUnit defines the frame of its pixels; it cannot be mixed with other inputs.
  const detail::WorkUnitMeta* frame_source = nullptr;
  for (const auto& raw : all)
    if (raw.workunit && raw.workunit->reprojected) frame_source = raw.workunit.get();
  if (frame_source)
    for (const auto& raw : all)
      if (!raw.workunit || raw.workunit->primary_path != frame_source->primary_path)
        throw Error(raw.exposure.label + " cannot be searched together with the reprojected WorkUnit " +
                    frame_source->primary_path + ": its pixels are not in that WorkUnit's frame");

  // One pixel grid for all.
  const int width = all[0].exposure.science.width, height = all[0].exposure.science.height;
  for (const auto& raw : all)
    if (raw.exposure.science.width != width || raw.exposure.science.height != height)
      throw Error(raw.exposure.label + " is " + std::to_string(raw.exposure.science.width) + "x" +
                  std::to_string(raw.exposure.science.height) + " but " + all[0].exposure.label + " is " +
                  std::to_string(width) + "x" + std::to_string(height) +
                  ": all exposures must share one pixel grid (warp them to a common frame first)");

  // Exposures mostly masked carry little and bias the clipping: dropped, as KBMOD does.
  std::vector<RawExposure> kept;
  for (auto& raw : all) {
    if (raw.masked_fraction > o.max_masked_fraction) {
      std::ostringstream s;
      s.precision(3);
      s << raw.exposure.label << ": dropped, " << 100 * raw.masked_fraction
        << "% of its pixels are masked (max_masked_pixels = " << o.max_masked_fraction << ")";
      loaded.warnings.push_back(s.str());
      continue;
    }
    kept.push_back(std::move(raw));
  }
  if (kept.size() < 2)
    throw Error("only " + std::to_string(kept.size()) + " usable exposure(s) after masking; a search needs at least 2");

  std::stable_sort(kept.begin(), kept.end(),
                   [](const RawExposure& a, const RawExposure& b) { return a.exposure.epoch < b.exposure.epoch; });
  // Exposures sharing an epoch stay separate exposures (their samples add independently), but
  // the same image given twice would count its noise twice: that is an error.
  std::size_t shared_epochs = 0;
  std::string shared_example;
  for (std::size_t i = 1; i < kept.size(); ++i)
    if (kept[i].exposure.epoch == kept[i - 1].exposure.epoch) {
      const Exposure& a = kept[i - 1].exposure;
      const Exposure& b = kept[i].exposure;
      std::ostringstream s;
      s.precision(12);
      s << b.label << " and " << a.label << " (MJD " << b.epoch << ", from " << kept[i].info.epoch_keyword << ")";
      if (a.science.pixels == b.science.pixels)
        throw Error(s.str() + " are the same image twice (same epoch, identical pixels); give each exposure once");
      if (shared_epochs++ == 0) shared_example = s.str();
    }
  if (shared_epochs > 0)
    loaded.warnings.push_back(std::to_string(shared_epochs) + " exposure(s) share an epoch with another, e.g. " +
                              shared_example + ": kept as separate exposures");

  // Shift-and-stack works in pixels: every exposure must be on the same grid. Compare where
  // each WCS puts the first exposure's centre.
  const Wcs* reference = nullptr;
  for (const auto& raw : kept)
    if (raw.wcs) {
      reference = &*raw.wcs;
      break;
    }
  bool one_grid = reference != nullptr;
  if (reference) {
    const double cx = 0.5 * (width - 1), cy = 0.5 * (height - 1);
    const SkyPosition centre = reference->pixel_to_sky(cx, cy);
    constexpr double max_offset_pixels = 0.5;
    for (const auto& raw : kept) {
      if (!raw.wcs) {
        one_grid = false;
        continue;
      }
      double x = 0, y = 0;
      try {
        raw.wcs->sky_to_pixel(centre.ra, centre.dec, x, y);
      } catch (const Error&) {
        one_grid = false;
        continue;
      }
      const double offset = std::hypot(x - cx, y - cy);
      if (offset > max_offset_pixels) {
        one_grid = false;
        std::ostringstream s;
        s.precision(3);
        s << raw.exposure.label << ": its WCS puts the common image centre " << offset
          << " px away from the first exposure's; the search assumes one pixel grid (warp the images first)";
        loaded.warnings.push_back(s.str());
      }
    }
  }

  // The grid's frame: a reprojected WorkUnit's, or the exposures' common WCS when they agree.
  if (frame_source) {
    loaded.frame.reprojected = true;
    loaded.frame.frame = frame_source->frame;
    loaded.frame.barycentric_distance = frame_source->barycentric_distance;
    loaded.frame.global = frame_source->global;
  } else if (one_grid) {
    const auto* wu = kept.front().workunit.get();
    loaded.frame.global = wu && wu->global ? wu->global : std::optional<Wcs>(*reference);
  }
  for (auto& raw : kept) {
    if (loaded.frame.frame == "ebd") loaded.frame.originals.push_back(std::move(raw.originals));
    loaded.curve_x.push_back(raw.curve_x);
    loaded.curve_y.push_back(raw.curve_y);
    loaded.info.push_back(std::move(raw.info));
    loaded.wcs.push_back(std::move(raw.wcs));
    loaded.stack.exposures.push_back(std::move(raw.exposure));
  }
  validate(loaded.stack);
  return loaded;
}

}  // namespace shiftstack::io
