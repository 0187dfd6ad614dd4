// wcslib wrapper. wcspih translates SIP (A_p_q, ...) and TPV (PVi_m) distortions itself.
#include "shiftstack/io/wcs.hpp"

#include <wcslib/wcs.h>
#include <wcslib/wcserr.h>
#include <wcslib/wcsfix.h>
#include <wcslib/wcshdr.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "shiftstack/error.hpp"

namespace shiftstack::io {

struct Wcs::State {
  mutable wcsprm wcs{};
  // wcsp2s/wcss2p keep scratch memory in the distortion structs: one caller at a time.
  mutable std::mutex lock;
  std::string label;
  std::string cards;  // the header it was parsed from
  ~State() { wcsfree(&wcs); }
};

namespace {

// Whether the matrix wcsset() will invert (CDi_j when given alone, else PCi_j with non-zero
// CDELTi) is regular: Gaussian elimination with partial pivoting, in double.
bool invertible_linear_part(const wcsprm& w) {
  const int n = w.naxis;
  if (n <= 0) return true;
  const bool cd_only = (w.altlin & 2) && !(w.altlin & 1);
  const double* source = cd_only ? w.cd : w.pc;
  if (!source) return true;
  if (!cd_only && !(w.altlin & 4))
    for (int i = 0; i < n; ++i)
      if (!(std::isfinite(w.cdelt[i]) && w.cdelt[i] != 0)) return false;
  if (!cd_only && (w.altlin & 4) && !(w.altlin & 1)) return true;  // CROTAi: a rotation
  std::vector<double> m(source, source + std::size_t(n) * n);
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int row = col + 1; row < n; ++row)
      if (std::abs(m[std::size_t(row * n + col)]) > std::abs(m[std::size_t(pivot * n + col)])) pivot = row;
    const double p = m[std::size_t(pivot * n + col)];
    if (!std::isfinite(p) || p == 0) return false;
    for (int k = 0; k < n; ++k) std::swap(m[std::size_t(col * n + k)], m[std::size_t(pivot * n + k)]);
    for (int row = col + 1; row < n; ++row) {
      const double f = m[std::size_t(row * n + col)] / p;
      for (int k = col; k < n; ++k) m[std::size_t(row * n + k)] -= f * m[std::size_t(col * n + k)];
    }
  }
  return true;
}

}  // namespace

std::optional<Wcs> Wcs::from_header(const std::string& cards, const std::string& label) {
  // Files are read in parallel; wcslib's header parser is not documented as re-entrant.
  static std::mutex parse_lock;
  std::lock_guard<std::mutex> guard(parse_lock);
  const int keys = int(cards.size() / 80);
  int rejected = 0, count = 0;
  wcsprm* all = nullptr;
  std::string buffer = cards;  // wcspih may annotate the cards it consumed; keep ours intact
  const int status = wcspih(buffer.data(), keys, WCSHDR_all, 0, &rejected, &count, &all);
  if (status != 0) throw Error(label + ": wcslib cannot parse the WCS header (status " + std::to_string(status) + ")");
  std::optional<Wcs> result;
  std::string failure;
  for (int i = 0; i < count && !result && failure.empty(); ++i) {
    wcsprm& candidate = all[i];
    if (candidate.alt[0] != ' ' && candidate.alt[0] != 0) continue;  // primary description only
    // Only headers that declare celestial axes count as having a WCS.
    bool celestial = false;
    for (int axis = 0; axis < candidate.naxis; ++axis) {
      const std::string ctype = candidate.ctype[axis];
      if (ctype.rfind("RA--", 0) == 0 || ctype.rfind("DEC-", 0) == 0 || ctype.rfind("GLON", 0) == 0 ||
          ctype.rfind("GLAT", 0) == 0 || ctype.rfind("ELON", 0) == 0 || ctype.rfind("ELAT", 0) == 0)
        celestial = true;
    }
    if (!celestial) continue;
    auto state = std::make_shared<State>();
    state->label = label;
    state->cards = cards;
    state->wcs.flag = -1;
    if (wcssub(1, &candidate, nullptr, nullptr, &state->wcs) != 0) {
      failure = label + ": wcslib cannot copy the WCS";
      break;
    }
    // Translate non-standard but common forms (e.g. DATE-OBS formats, CDELT with CD) first.
    // Error reports stay off here: wcslib 7.12's datfix() files one report per date it derives
    // and drops the previous one unfreed (a leak on every KBMOD WorkUnit WCS); nothing reads them.
    int fix_status[NWCSFIX];
    wcserr_enable(0);
    wcsfix(7, nullptr, &state->wcs, fix_status);
    // wcsfix reports what it could not fix in wcs.err, and a later report replaces the struct
    // without freeing its message: clear it (nothing here reads it) before wcsset fills it anew.
    wcserr_clear(&state->wcs.err);
    // wcslib 7.12's linset() leaks its matrices when it finds them singular: refuse those first.
    if (!invertible_linear_part(state->wcs)) {
      failure = label + ": wcslib rejects the WCS: its linear transformation (PCi_j/CDi_j, CDELTi) is singular";
      break;
    }
    wcserr_enable(1);  // wcsset's report names what is wrong
    const int set_status = wcsset(&state->wcs);
    wcserr_enable(0);
    if (set_status != 0) {
      std::string why = state->wcs.err && state->wcs.err->msg ? state->wcs.err->msg : wcs_errmsg[set_status];
      failure = label + ": wcslib rejects the WCS: " + why;
      break;
    }
    if (state->wcs.lng < 0 || state->wcs.lat < 0) continue;
    Wcs w;
    w.state_ = std::move(state);
    result = std::move(w);
  }
  wcsvfree(&count, &all);
  if (!failure.empty()) throw Error(failure);
  return result;
}

SkyPosition Wcs::pixel_to_sky(double x, double y) const {
  std::lock_guard<std::mutex> guard(state_->lock);
  wcsprm& w = state_->wcs;
  // FITS pixels are 1-based: our 0-based (x, y) is (x + 1, y + 1) there.
  std::vector<double> pixel(w.naxis, 1.0), intermediate(w.naxis), world(w.naxis);
  pixel[0] = x + 1;
  pixel[1] = y + 1;
  double phi = 0, theta = 0;
  int stat = 0;
  const int status = wcsp2s(&w, 1, w.naxis, pixel.data(), intermediate.data(), &phi, &theta, world.data(), &stat);
  if (status != 0)
    throw Error(state_->label + ": pixel (" + std::to_string(x) + ", " + std::to_string(y) +
                ") has no sky position: " + wcs_errmsg[status]);
  return {world[w.lng], world[w.lat]};
}

void Wcs::sky_to_pixel(double ra, double dec, double& x, double& y) const {
  std::lock_guard<std::mutex> guard(state_->lock);
  wcsprm& w = state_->wcs;
  std::vector<double> pixel(w.naxis), intermediate(w.naxis), world(w.naxis, 0.0);
  world[w.lng] = ra;
  world[w.lat] = dec;
  double phi = 0, theta = 0;
  int stat = 0;
  const int status = wcss2p(&w, 1, w.naxis, world.data(), &phi, &theta, intermediate.data(), pixel.data(), &stat);
  if (status != 0)
    throw Error(state_->label + ": sky position (" + std::to_string(ra) + ", " + std::to_string(dec) +
                ") has no pixel: " + wcs_errmsg[status]);
  x = pixel[0] - 1;
  y = pixel[1] - 1;
}

std::string Wcs::description() const {
  const wcsprm& w = state_->wcs;
  std::string d;
  for (int axis = 0; axis < w.naxis; ++axis) {
    std::string c = w.ctype[axis];
    while (!c.empty() && c.back() == ' ') c.pop_back();
    d += (axis ? "/" : "") + c;
  }
  if (has_distortion()) d += " (with distortion)";
  return d;
}

namespace {

// Keywords of the primary celestial WCS and its SIP/TPV distortions (alternates excluded).
bool is_wcs_keyword(const std::string& key) {
  static const std::regex pattern(
      "WCSAXES|CRPIX[12]|CRVAL[12]|CDELT[12]|CUNIT[12]|CTYPE[12]|CROTA[12]|CD[12]_[12]|PC[12]_[12]|LONPOLE|LATPOLE|"
      "RADESYS|EQUINOX|MJDREF|[AB]P?_ORDER|[AB]P?_[0-9]+_[0-9]+|PV[12]_[0-9]+|PS[12]_[0-9]+|A_DMAX|B_DMAX");
  return std::regex_match(key, pattern);
}

}  // namespace

std::string Wcs::to_kbmod_json(int width, int height) const {
  nlohmann::ordered_json dict = nlohmann::ordered_json::object();
  const std::string& cards = state_->cards;
  for (std::size_t at = 0; at + 80 <= cards.size(); at += 80) {
    const std::string card = cards.substr(at, 80);
    std::string key = card.substr(0, 8);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    if (card.compare(8, 2, "= ") != 0 || !is_wcs_keyword(key)) continue;
    std::string value = card.substr(10);
    const std::size_t start = value.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    value = value.substr(start);
    if (value[0] == '\'') {
      std::string text;
      for (std::size_t k = 1; k < value.size(); ++k) {
        if (value[k] == '\'') {
          if (k + 1 < value.size() && value[k + 1] == '\'') {
            text += '\'';
            ++k;
            continue;
          }
          break;
        }
        text += value[k];
      }
      while (!text.empty() && text.back() == ' ') text.pop_back();
      dict[key] = text;
      continue;
    }
    value = value.substr(0, value.find('/'));
    while (!value.empty() && value.back() == ' ') value.pop_back();
    if (value == "T" || value == "F") {
      dict[key] = value == "T";
      continue;
    }
    for (char& c : value)
      if (c == 'D' || c == 'd') c = 'E';
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    if (!end || *end != 0) continue;
    if (value.find_first_of(".Ee") == std::string::npos && std::abs(number) < 9e15)
      dict[key] = static_cast<long long>(number);
    else
      dict[key] = number;
  }
  dict["NAXIS1"] = width;
  dict["NAXIS2"] = height;
  return dict.dump();
}

bool Wcs::has_distortion() const { return state_->wcs.lin.dispre || state_->wcs.lin.disseq; }

std::string synthetic_tan_wcs_cards(int width, int height) {
  constexpr double decam_scale_degrees = 0.263 / 3600;
  std::string cards;
  auto card = [&](const std::string& text) {
    std::string c = text;
    c.resize(80, ' ');
    cards += c;
  };
  char line[81];
  card("CTYPE1  = 'RA---TAN'");
  card("CTYPE2  = 'DEC--TAN'");
  std::snprintf(line, sizeof line, "CRPIX1  = %20.10f", 0.5 * (width + 1));
  card(line);
  std::snprintf(line, sizeof line, "CRPIX2  = %20.10f", 0.5 * (height + 1));
  card(line);
  card("CRVAL1  =                150.0");
  card("CRVAL2  =                  2.0");
  std::snprintf(line, sizeof line, "CD1_1   = %20.12E", -decam_scale_degrees);
  card(line);
  card("CD1_2   =                  0.0");
  card("CD2_1   =                  0.0");
  std::snprintf(line, sizeof line, "CD2_2   = %20.12E", decam_scale_degrees);
  card(line);
  return cards;
}

}  // namespace shiftstack::io
