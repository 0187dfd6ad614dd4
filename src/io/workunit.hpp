// KBMOD WorkUnits (internal to the reader): the primary file's metadata (image count,
// reprojection frame, global WCS, the original images behind each exposure), its embedded
// search configuration, and sharded WorkUnits (a primary file plus one file per image).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/fits_util.hpp"
#include "shiftstack/io/fits.hpp"

namespace shiftstack::io::detail {

struct WorkUnitMeta {
  std::string primary_path;
  int images = -1;                 // NUMIMG; -1 when absent (SCI_i counted instead)
  bool reprojected = false;        // REPRJCTD
  std::string frame;               // REPFRAME: "", "original" or "ebd"
  std::optional<double> barycentric_distance;  // BARY (AU)
  std::optional<Wcs> global;       // WCS of the primary header
  std::vector<OriginalFrame> constituents;     // IMG_META rows (may be empty)
  bool sharded = false;            // images live in files i_<name> beside the primary
};

// Whether the open file (positioned anywhere) is a WorkUnit: an SCI_0 HDU, a KBMOD_CONFIG
// table, or an SCI_<n> HDU (one shard).
bool is_workunit(FitsFile& file);

// The metadata of a WorkUnit's primary file (the file must be open; moves the HDU).
WorkUnitMeta read_workunit_meta(FitsFile& file, const Header& primary);

// The constituent (original image) indices of exposure `index` from its SCI header's NIND,
// IND_j keywords; {index} when absent.
std::vector<int> constituent_indices(const Header& science_header, int index);

// The search configuration a WorkUnit stores (KBMOD_CONFIG: one row, one YAML text per
// column), as one YAML mapping; nullopt when the file has none.
std::optional<std::string> read_embedded_config(FitsFile& file);

// One WorkUnit image file to read: a whole WorkUnit, or one shard (image `shard_index` of the
// sharded WorkUnit described by `meta`).
struct WorkUnitPart {
  std::string path;
  std::shared_ptr<const WorkUnitMeta> meta;  // null: read the file's own primary header
  int shard_index = -1;
};

// Replaces each sharded WorkUnit's primary file in `files` by its shards (the shard files
// themselves are dropped where they also appear as inputs, so a folder holding a sharded
// WorkUnit reads each image once). Parts with a null meta are ordinary files.
std::vector<WorkUnitPart> resolve_workunit_shards(const std::vector<std::string>& files);

// A WCS from KBMOD's serialized form (a JSON object of header keywords, with NAXIS1/NAXIS2).
std::optional<Wcs> wcs_from_json(const std::string& json, const std::string& label, int* width = nullptr,
                                 int* height = nullptr);

}  // namespace shiftstack::io::detail
