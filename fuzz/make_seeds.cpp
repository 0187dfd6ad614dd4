// Writes the fuzz targets' seed corpora: tiny exposures in every layout the reader knows (Rubin,
// WorkUnit, tile-compressed WorkUnit), pairs of them, and configurations. Third-party fixtures
// and the reproducers (tests/data) are added by fuzz/run.sh.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/io/wcs.hpp"
#include "shiftstack/synth.hpp"

namespace fs = std::filesystem;
using namespace shiftstack;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

KitStack tiny_kit(std::uint64_t seed, int exposures, int side) {
  KitOptions o = workload("ci");
  o.exposures = exposures, o.width = side, o.height = side - 2, o.vx_count = 2, o.vy_count = 2;
  o.velocity_displacement = 1, o.curve_amplitude = 0.5, o.seed = seed;
  o.psf_sigma_min = 0.5, o.psf_sigma_max = 0.6;  // small kernels keep the files small
  o.inject = false;  // an injected trajectory needs a larger image
  return make_kit(o);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_FOLDER (writes read_one/, read_pair/ and config/ in it)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* sub : {"read_one", "read_pair", "config", "work"}) fs::create_directories(root / sub);
  const KitStack kit = tiny_kit(1, 2, 8);
  const std::string cards = io::synthetic_tan_wcs_cards(kit.stack.width(), kit.stack.height());
  std::string files[2];
  for (int e = 0; e < 2; ++e) {
    io::WriteOptions w;
    w.curve_x = kit.bank.curve_at_x(e);
    w.curve_y = kit.bank.curve_at_y(e);
    w.extra_cards = e == 0 ? cards : std::string();  // one with a WCS, one without
    const fs::path p = root / "work" / ("exposure_" + std::to_string(e) + ".fits");
    io::write_exposure_fits(p.string(), kit.stack.exposures[std::size_t(e)], w);
    files[e] = slurp(p);
    put(root / "read_one" / ("rubin_" + std::to_string(e) + ".fits"), files[e]);
  }
  io::write_workunit_fits((root / "work" / "wu.fits").string(), kit.stack, false);
  put(root / "read_one" / "workunit.fits", slurp(root / "work" / "wu.fits"));
  io::write_workunit_fits((root / "work" / "wuz.fits").string(), kit.stack, true);
  put(root / "read_one" / "workunit_gzip2.fits", slurp(root / "work" / "wuz.fits"));
  // Pairs: 4-byte little-endian length of the first file, then both files.
  auto pair = [](const std::string& a, const std::string& b) {
    std::string out(4, '\0');
    for (int i = 0; i < 4; ++i) out[std::size_t(i)] = char((a.size() >> (8 * i)) & 0xff);
    return out + a + b;
  };
  put(root / "read_pair" / "rubin_pair.fits2", pair(files[0], files[1]));
  put(root / "read_pair" / "rubin_workunit.fits2", pair(files[1], slurp(root / "work" / "wuz.fits")));
  fs::remove_all(root / "work");

  put(root / "config" / "default.yaml", io::default_config_text());
  put(root / "config" / "grid.yaml",
      "generator_config:\n  name: VelocityGridSearch\n  vx_steps: 3\n  min_vx: -1\n  max_vx: 1\n"
      "  vy_steps: 2\n  min_vy: -0.5\n  max_vy: 0.5\nshift_mode: fractional\nlh_level: 5.5\nnum_obs: 2\n");
  put(root / "config" / "ecliptic.yaml",
      "generator_config:\n  name: EclipticCenteredSearch\n  velocities: [0, 10, 5]\n  angles: [-15, 15, 3]\n"
      "  angles_in_degrees: true\n  given_ecliptic: 10\nsigmaG_lims: [25, 75]\nclip_negative: true\n"
      "x_pixel_bounds: [0, 10]\ny_pixel_bounds: [2, 8]\n");
  std::printf("seed corpora written under %s\n", root.string().c_str());
  return 0;
}
