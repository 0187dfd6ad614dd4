// The real-data side of shiftstack in one include: FITS exposures in and out, WCS, the search
// configuration, results tables and the end-to-end search pipeline (built with cfitsio, wcslib
// and yaml-cpp; link shiftstack_io).
#pragma once
#include "shiftstack/io/config.hpp"
#include "shiftstack/io/fits.hpp"
#include "shiftstack/io/results.hpp"
#include "shiftstack/run.hpp"
#include "shiftstack/io/wcs.hpp"
