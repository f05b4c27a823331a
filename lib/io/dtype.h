/* dtype.h — moved to lib/core/dtype.h (the ground floor: element types belong to no file
 * format). This forwarding header lets code written before the move build; include
 * "lib/core/dtype.h" in new code. */
#include "lib/core/dtype.h"
