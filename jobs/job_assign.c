/* job_assign.c — which data-parallel group renders which item (see job_items.h).
 *
 * Round-robin by item index: item i goes to group i mod dp. The assignment depends only on
 * the item index and the dp degree, so the same manifest on the same grid always gives the
 * same assignment, every rank computes it without communication, and a resumed run (which
 * skips finished items) keeps every remaining item on the group it had. Group g gets
 * ceil((n - g) / dp) of n items: the counts differ by at most one.
 */
#include "jobs/job_items.h"

int job_assign_group(uint64_t index, int dp)
{
    if (dp <= 1)
        return 0;
    return (int)(index % (uint64_t)dp);
}

uint64_t job_assign_group_count(uint64_t n_items, int dp, int group)
{
    if (dp <= 1)
        return group == 0 ? n_items : 0;
    if (group < 0 || group >= dp || (uint64_t)group >= n_items)
        return 0;
    return (n_items - (uint64_t)group + (uint64_t)dp - 1) / (uint64_t)dp;
}
