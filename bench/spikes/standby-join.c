/* Spike for docs/benchmarks.md, "Towards a 50 ms move" (not built by cargo or CI). */
/* Spike: a standby pre-spawned by rank 0 alone (over MPI_COMM_SELF), joined to the job
   later with MPI_Intercomm_create + merge (no port names), against a spawn over the world
   at the move. Times the "move" part only: from all ranks agreeing (a barrier) to an
   allreduce over the N+1 communicator. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define TAG 4242
int main(int argc,char**argv){
  MPI_Init(&argc,&argv);
  MPI_Comm parent; MPI_Comm_get_parent(&parent);
  if(parent!=MPI_COMM_NULL){
    int standby = argc>1 && strcmp(argv[1],"standby")==0;
    MPI_Comm merged;
    if(standby){
      MPI_Comm pair, inter;
      MPI_Intercomm_merge(parent,1,&pair);            /* {rank0, me} */
      MPI_Intercomm_create(MPI_COMM_SELF,0,pair,0,TAG,&inter);
      MPI_Intercomm_merge(inter,1,&merged);
      { double a=1,b; MPI_Allreduce(&a,&b,1,MPI_DOUBLE,MPI_SUM,merged); }
      MPI_Comm_free(&inter);
      MPI_Comm_free(&pair);
    } else {
      MPI_Intercomm_merge(parent,1,&merged);
    }
    double x=1,y; MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,merged);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&parent);
    MPI_Finalize(); return 0;
  }
  int rank,size; MPI_Comm_rank(MPI_COMM_WORLD,&rank); MPI_Comm_size(MPI_COMM_WORLD,&size);
  int rounds = argc>1 ? atoi(argv[1]) : 5;
  for(int k=0;k<rounds;k++){
    /* standby path: rank 0 spawns ahead of need (timed apart: that is the stall it costs rank 0) */
    MPI_Comm sb_inter=MPI_COMM_NULL, sb_pair=MPI_COMM_NULL;
    double p0=now();
    if(rank==0){
      char*args[]={"standby",NULL};
      MPI_Comm_spawn(argv[0],args,1,MPI_INFO_NULL,0,MPI_COMM_SELF,&sb_inter,MPI_ERRCODES_IGNORE);
      MPI_Intercomm_merge(sb_inter,0,&sb_pair);
    }
    double prespawn=now()-p0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0=now();
    MPI_Comm inter, merged;
    MPI_Intercomm_create(MPI_COMM_WORLD,0,rank==0?sb_pair:MPI_COMM_NULL,1,TAG,&inter);
    double t1=now();
    MPI_Intercomm_merge(inter,0,&merged);
    double t2=now();
    double x=1,y; MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,merged);
    double t3=now();
    MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,merged);
    double t4=now();
    double standby_ms=(t3-t0)*1e3;
    double parts[4]={(t1-t0)*1e3,(t2-t1)*1e3,(t3-t2)*1e3,(t4-t3)*1e3}, mx[4];
    MPI_Reduce(parts,mx,4,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD);
    if(rank==0) printf("  standby parts (max over ranks): create %.2f merge %.2f allreduce1 %.2f allreduce2 %.3f\n",mx[0],mx[1],mx[2],mx[3]);
    MPI_Comm_free(&merged); MPI_Comm_free(&inter);
    if(rank==0){ MPI_Comm_free(&sb_pair); MPI_Comm_disconnect(&sb_inter); }
    /* spawn path: all ranks spawn at the move */
    MPI_Barrier(MPI_COMM_WORLD);
    t0=now();
    MPI_Comm child, m2;
    char*args2[]={"plain",NULL};
    MPI_Comm_spawn(argv[0],args2,1,MPI_INFO_NULL,0,MPI_COMM_WORLD,&child,MPI_ERRCODES_IGNORE);
    MPI_Intercomm_merge(child,0,&m2);
    MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,m2);
    double spawn_ms=(now()-t0)*1e3;
    MPI_Comm_free(&m2); MPI_Comm_disconnect(&child);
    if(rank==0) printf("round %d: prespawn(rank0 alone) %.1f ms | move with standby %.2f ms (sum %.0f) | move with spawn %.1f ms\n",k,prespawn*1e3,standby_ms,y,spawn_ms);
    fflush(stdout);
  }
  MPI_Finalize(); return 0;
}
