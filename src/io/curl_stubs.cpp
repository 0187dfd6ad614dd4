// Stand-ins for the libcurl functions a static libcfitsio references. cfitsio uses libcurl only
// for https:// and ftps:// file names, which shiftstack never opens (it reads local files), so
// builds against a staged libcfitsio.a need no libcurl: initialization succeeds and any remote
// open fails cleanly because no transfer handle can be made.
extern "C" {

int curl_global_init(long /*flags*/) { return 0; }  // CURLE_OK: cfitsio calls this at start-up
void curl_global_cleanup() {}
void* curl_easy_init() { return nullptr; }  // cfitsio reports the failed remote open
int curl_easy_setopt(void* /*handle*/, int /*option*/, ...) { return 2; }  // CURLE_FAILED_INIT
int curl_easy_perform(void* /*handle*/) { return 2; }
void curl_easy_cleanup(void* /*handle*/) {}

}
