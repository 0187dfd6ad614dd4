// The results tables: KBMOD's columns and table metadata, then shiftstack's own columns.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "shiftstack/error.hpp"
#include "shiftstack/run.hpp"

namespace shiftstack::io {

namespace {

// A deterministic 128-bit identifier per candidate (same inputs and trajectory, same uuid),
// printed as 32 hexadecimal digits like KBMOD's uuid4().hex.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::uint64_t hash_text(std::uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = mix64(h ^ c);
  return h;
}
std::uint64_t hash_double(std::uint64_t h, double v) {
  std::uint64_t bits = 0;
  static_assert(sizeof bits == sizeof v);
  std::memcpy(&bits, &v, sizeof v);
  return mix64(h ^ bits);
}

using T = Column::Type;

struct TableBuilder {
  ResultTable& t;
  // add() may reallocate the column list: fill each column before adding the next.
  Column& add(const std::string& name, T type, const std::string& unit, const std::string& description,
              std::vector<int> shape = {}) {
    Column c;
    c.name = name;
    c.type = type;
    c.unit = unit;
    c.description = description;
    c.shape = std::move(shape);
    t.columns.push_back(std::move(c));
    return t.columns.back();
  }
};

int first_epoch(const MotionBank& bank) {
  int first = 0;
  for (int e = 1; e < bank.exposures(); ++e)
    if (bank.epochs[std::size_t(e)] < bank.epochs[std::size_t(first)]) first = e;
  return first;
}

// The columns every table of detections has: trajectory, scores, light curves, identifiers.
void add_detection_columns(TableBuilder& b, const RunOutput& run, const SearchConfig& config,
                           const std::vector<Detection>& detections) {
  const MotionBank& bank = run.bank;
  const int E = bank.exposures(), first = first_epoch(bank);
  std::vector<PixelIndex> start(detections.size());
  for (std::size_t i = 0; i < detections.size(); ++i) {
    const Candidate& c = detections[i].candidate;
    start[i] = sampled_pixel(bank, c.x, c.y, std::size_t(c.velocity), first);
  }
  {
    Column& c = b.add("x", T::int64, "pix", "x at the first epoch (0-based pixel the search sampled)");
    for (const auto& p : start) c.integers.push_back(p.x);
  }
  {
    Column& c = b.add("y", T::int64, "pix", "y at the first epoch (0-based pixel the search sampled)");
    for (const auto& p : start) c.integers.push_back(p.y);
  }
  {
    Column& c = b.add("vx", T::float64, "pix / d", "velocity in x");
    for (const auto& d : detections) c.reals.push_back(bank.velocity(std::size_t(d.candidate.velocity)).vx);
  }
  {
    Column& c = b.add("vy", T::float64, "pix / d", "velocity in y");
    for (const auto& d : detections) c.reals.push_back(bank.velocity(std::size_t(d.candidate.velocity)).vy);
  }
  {
    Column& c = b.add("likelihood", T::float64, "", "sum(psi)/sqrt(sum(phi)) over valid epochs");
    for (const auto& d : detections) c.reals.push_back(d.likelihood);
  }
  {
    Column& c = b.add("flux", T::float64, "", "sum(psi)/sum(phi) over valid epochs (science units)");
    for (const auto& d : detections) c.reals.push_back(d.flux);
  }
  {
    Column& c = b.add("obs_count", T::int64, "", "valid epochs after sigma-G clipping");
    for (const auto& d : detections) c.integers.push_back(d.obs_count);
  }
  // Inputs fingerprint, so the same trajectory on the same data keeps its uuid.
  std::uint64_t base = 0x5eedull;
  for (const auto& info : run.loaded.info) base = hash_double(hash_text(base, info.file), info.epoch);
  {
    Column& c = b.add("uuid", T::string, "", "identifier (deterministic hash of inputs and trajectory)");
    for (const auto& d : detections) {
      std::uint64_t h1 = hash_double(hash_double(base, d.candidate.x), d.candidate.y);
      h1 = hash_double(h1, double(d.candidate.velocity));
      const std::uint64_t h2 = mix64(h1 ^ 0xa5a5a5a5a5a5a5a5ull);
      char text[33];
      std::snprintf(text, sizeof text, "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
      c.strings.emplace_back(text);
    }
  }
  if (config.generate_psi_phi) {
    Column& psi = b.add("psi_curve", T::float64, "", "a_e psi_e along the trajectory, per epoch (meta mjd_mid)", {E});
    for (const auto& d : detections) psi.reals.insert(psi.reals.end(), d.curve.psi.begin(), d.curve.psi.end());
    Column& phi = b.add("phi_curve", T::float64, "", "a_e^2 phi_e along the trajectory, per epoch", {E});
    for (const auto& d : detections) phi.reals.insert(phi.reals.end(), d.curve.phi.begin(), d.curve.phi.end());
  }
  {
    Column& valid = b.add("obs_valid", T::boolean, "", "epoch used (has data and survived sigma-G)", {E});
    for (const auto& d : detections) valid.integers.insert(valid.integers.end(), d.obs_valid.begin(), d.obs_valid.end());
  }
  {
    Column& c = b.add("x_ref", T::int64, "pix", "origin x at t_ref (meta t_ref), as the search indexed it");
    for (const auto& d : detections) c.integers.push_back(d.candidate.x);
  }
  {
    Column& c = b.add("y_ref", T::int64, "pix", "origin y at t_ref");
    for (const auto& d : detections) c.integers.push_back(d.candidate.y);
  }
  {
    Column& c = b.add("search_likelihood", T::float64, "", "score the search engine reported (all epochs)");
    for (const auto& d : detections) c.reals.push_back(d.candidate.Z);
  }
  {
    Column& c = b.add("cluster_size", T::int64, "", "filtered candidates merged into this one");
    for (const auto& d : detections) c.integers.push_back(d.cluster_size);
  }
}

nlohmann::json table_meta(const RunOutput& run, const SearchConfig& config) {
  const MotionBank& bank = run.bank;
  std::vector<double> tai;
  for (double mjd : bank.epochs) tai.push_back(utc_to_tai(mjd));
  const int first = first_epoch(bank);
  nlohmann::json meta = {
      {"shiftstack_version", SHIFTSTACK_VERSION},
      // KBMOD's Results metadata (read by Results.read_table).
      {"mjd_mid", bank.epochs},
      {"mjd_utc_mid", bank.epochs},
      {"mjd_tai_mid", tai},
      {"num_img", bank.exposures()},
      {"dims", {run.width, run.height}},
      // shiftstack's.
      {"t_ref", bank.t_ref},
      {"reference_time", run.reference_time},
      {"t_first", bank.epochs.empty() ? 0.0 : bank.epochs[std::size_t(first)]},
      {"pixel_origin",
       "0-based, (0, 0) the centre of the first pixel; x, y: the pixel at the first epoch (t_first), so "
       "x + vx (t - t_first) is the track within half a pixel; pred_x, pred_y are exact; x_ref, y_ref: the origin at t_ref"},
      {"shift_mode", bank.mode == ShiftMode::integer ? "integer" : "fractional"},
      {"engine", run.engine},
      {"encoding", to_string(run.encoding)},
      {"lh_level", config.filter.lh_level},
      {"exposures", bank.exposures()},
      {"cluster_type", config.do_clustering ? to_string(config.cluster.space) : std::string("off")}};
  const GridFrame& frame = run.loaded.frame;
  if (frame.global && config.compute_ra_dec)
    meta["wcs"] = frame.global->to_kbmod_json(run.width, run.height);
  if (frame.reprojected) {
    meta["reprojection_frame"] = frame.frame.empty() ? std::string("original") : frame.frame;
    if (frame.barycentric_distance) meta["barycentric_distance"] = *frame.barycentric_distance;
  }
  if (!config.drop_columns.empty()) meta["dropped_columns"] = config.drop_columns;
  return meta;
}

void drop_columns(ResultTable& t, const std::vector<std::string>& names) {
  t.columns.erase(std::remove_if(t.columns.begin(), t.columns.end(),
                                 [&](const Column& c) { return std::find(names.begin(), names.end(), c.name) != names.end(); }),
                  t.columns.end());
}

}  // namespace

ResultTable make_result_table(const RunOutput& run, const SearchConfig& config) {
  ResultTable t;
  TableBuilder b{t};
  const std::size_t n = run.detections.size();
  const int E = run.bank.exposures();
  t.rows = n;
  add_detection_columns(b, run, config, run.detections);

  const int side = 2 * config.stamp_radius + 1;
  for (std::size_t k = 0; k < run.coadd_types.size(); ++k) {
    const CoaddType type = run.coadd_types[k];
    std::vector<std::string> names;
    if (type == config.stamp_type) names.push_back("stamp");
    // KBMOD always adds the stamp type's coadd_<type> column too.
    if (type == config.stamp_type || std::find(config.coadds.begin(), config.coadds.end(), type) != config.coadds.end())
      names.push_back("coadd_" + to_string(type));
    for (const auto& name : names) {
      Column& c = b.add(name, T::float32, "", to_string(type) + " coadd along the trajectory (valid epochs)", {side, side});
      for (const auto& stamp : run.stamps[k]) c.reals.insert(c.reals.end(), stamp.pixels.begin(), stamp.pixels.end());
    }
  }
  if (config.save_all_stamps) {
    require(run.all_stamps.size() == n, "make_result_table: all_stamps missing");
    Column& c = b.add("all_stamps", T::float32, "", "science stamp at every epoch (NaN: masked or outside)", {E, side, side});
    for (const auto& row : run.all_stamps)
      for (const auto& stamp : row) c.reals.insert(c.reals.end(), stamp.pixels.begin(), stamp.pixels.end());
  }
  {
    Column& px = b.add("pred_x", T::float64, "pix", "predicted x at every epoch (continuous, 0-based)", {E});
    Column* py = nullptr;
    for (const auto& d : run.detections)
      for (int e = 0; e < E; ++e)
        px.reals.push_back(predicted_position(run.bank, d.candidate.x, d.candidate.y, std::size_t(d.candidate.velocity), e).x);
    py = &b.add("pred_y", T::float64, "pix", "predicted y at every epoch (continuous, 0-based)", {E});
    for (const auto& d : run.detections)
      for (int e = 0; e < E; ++e)
        py->reals.push_back(predicted_position(run.bank, d.candidate.x, d.candidate.y, std::size_t(d.candidate.velocity), e).y);
  }
  if (config.compute_ra_dec) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto add_sky = [&](const std::string& name, const std::string& text, const std::vector<std::vector<SkyPosition>>& sky,
                       bool ra) {
      Column& c = b.add(name, T::float64, "deg", text, {E});
      for (std::size_t i = 0; i < n; ++i)
        for (int e = 0; e < E; ++e) {
          if (sky.empty()) {
            c.reals.push_back(nan);
            continue;
          }
          const SkyPosition& p = sky[i][std::size_t(e)];
          c.reals.push_back(ra ? p.ra : p.dec);
        }
    };
    const bool ebd = run.loaded.frame.frame == "ebd";
    const std::string observed = ebd ? " as observed (through the original images of the ebd WorkUnit)" : "";
    add_sky("img_ra", "RA at every epoch through that exposure's WCS" + observed, run.sky_image, true);
    add_sky("img_dec", "Dec at every epoch through that exposure's WCS" + observed, run.sky_image, false);
    if (run.have_global) {
      const std::string frame = ebd ? " (the WorkUnit's ebd frame: parallax-corrected for meta barycentric_distance)" : "";
      add_sky("global_ra", "RA at every epoch through the common WCS (meta wcs)" + frame, run.sky_global, true);
      add_sky("global_dec", "Dec at every epoch through the common WCS (meta wcs)" + frame, run.sky_global, false);
    }
    const char* names[4] = {"ra_first", "dec_first", "ra_last", "dec_last"};
    const char* text[4] = {"RA at the first epoch", "Dec at the first epoch", "RA at the last epoch", "Dec at the last epoch"};
    for (int k = 0; k < 4; ++k) {
      Column& c = b.add(names[k], T::float64, "deg", text[k] + observed);
      for (std::size_t i = 0; i < n; ++i) {
        const SkyPosition& p = k < 2 ? run.sky_first[i] : run.sky_last[i];
        c.reals.push_back(k % 2 == 0 ? p.ra : p.dec);
      }
    }
  }
  t.meta = table_meta(run, config);
  drop_columns(t, config.drop_columns);
  return t;
}

ResultTable make_unclustered_table(const RunOutput& run, const SearchConfig& config) {
  ResultTable t;
  TableBuilder b{t};
  t.rows = run.unclustered.size();
  require(run.unclustered_row.size() == run.unclustered.size(), "make_unclustered_table: rows missing");
  add_detection_columns(b, run, config, run.unclustered);
  Column& c = b.add("cluster_row", T::int64, "", "row of the clustered table this detection was merged into (-1: none)");
  for (int r : run.unclustered_row) c.integers.push_back(r);
  t.meta = table_meta(run, config);
  t.meta["unclustered"] = true;
  drop_columns(t, config.drop_columns);
  return t;
}

}  // namespace shiftstack::io
