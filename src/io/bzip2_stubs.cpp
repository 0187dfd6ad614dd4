// Stand-ins for the bzip2 reader a static libcfitsio references, used only when no libbz2 is
// found: opening a .bz2-compressed FITS file then fails with cfitsio's error instead of the
// whole tool failing to link. Plain and tile-compressed FITS files do not use bzip2.
#include <cstdio>

extern "C" {

void* BZ2_bzReadOpen(int* error, std::FILE* /*file*/, int /*verbosity*/, int /*small*/, void* /*unused*/,
                     int /*unused_count*/) {
  if (error) *error = -3;  // BZ_MEM_ERROR: no decompressor
  return nullptr;
}
int BZ2_bzRead(int* error, void* /*handle*/, void* /*buffer*/, int /*length*/) {
  if (error) *error = -3;
  return 0;
}
void BZ2_bzReadClose(int* error, void* /*handle*/) {
  if (error) *error = 0;
}

}
