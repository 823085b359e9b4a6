//! Pareto fronts over two measured objectives, pure and unit-tested.
//!
//! A point is on the front when no other point is at least as good on both axes and strictly
//! better on one. Non-finite coordinates are ignored (never on the front).

/// Which way is better on one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    Min,
    Max,
}

impl Goal {
    /// `a` is at least as good as `b`.
    fn at_least(self, a: f64, b: f64) -> bool {
        match self {
            Goal::Min => a <= b,
            Goal::Max => a >= b,
        }
    }
}

/// Indices of the points on the Pareto front, ordered by x ascending (ties by y ascending).
/// Duplicate points are all kept (neither dominates the other).
pub fn front(points: &[(f64, f64)], x: Goal, y: Goal) -> Vec<usize> {
    let finite = |i: usize| points[i].0.is_finite() && points[i].1.is_finite();
    let dominates = |a: (f64, f64), b: (f64, f64)| {
        x.at_least(a.0, b.0) && y.at_least(a.1, b.1) && (a.0 != b.0 || a.1 != b.1)
    };
    let mut idx: Vec<usize> = (0..points.len())
        .filter(|&i| finite(i))
        .filter(|&i| {
            !(0..points.len())
                .filter(|&j| j != i && finite(j))
                .any(|j| dominates(points[j], points[i]))
        })
        .collect();
    idx.sort_by(|&a, &b| {
        points[a]
            .0
            .total_cmp(&points[b].0)
            .then(points[a].1.total_cmp(&points[b].1))
    });
    idx
}

/// The front as a staircase for drawing: the boundary of the region the front dominates.
/// Between two consecutive front points the corner takes the worse x and the worse y of the
/// two. Input: front points ordered by x ascending (as [`front`] returns them).
pub fn staircase(front_points: &[(f64, f64)], x: Goal, y: Goal) -> Vec<(f64, f64)> {
    let worse = |g: Goal, a: f64, b: f64| if g.at_least(a, b) { b } else { a };
    let mut out = Vec::with_capacity(front_points.len() * 2);
    for (i, &(px, py)) in front_points.iter().enumerate() {
        if i > 0 {
            let (qx, qy) = front_points[i - 1];
            out.push((worse(x, qx, px), worse(y, qy, py)));
        }
        out.push((px, py));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_y_min_x_keeps_only_undominated_points() {
        // (VRAM MiB, tok/s)
        let pts = [
            (10_000.0, 20.0), // front: least VRAM
            (12_000.0, 18.0), // dominated by the first
            (14_000.0, 30.0), // front
            (14_000.0, 25.0), // dominated (same VRAM, slower)
            (16_000.0, 29.0), // dominated by the third
            (18_000.0, 35.0), // front: fastest
        ];
        assert_eq!(front(&pts, Goal::Min, Goal::Max), vec![0, 2, 5]);
    }

    #[test]
    fn max_max_front() {
        // (prompt tok/s, gen tok/s)
        let pts = [
            (100.0, 10.0),
            (200.0, 8.0),
            (150.0, 12.0),
            (90.0, 9.0),
            (250.0, 5.0),
        ];
        assert_eq!(front(&pts, Goal::Max, Goal::Max), vec![2, 1, 4]);
    }

    #[test]
    fn duplicates_both_stay_and_nan_is_ignored() {
        let pts = [
            (1.0, 5.0),
            (1.0, 5.0),
            (f64::NAN, 100.0),
            (2.0, f64::INFINITY),
            (3.0, 1.0),
        ];
        assert_eq!(front(&pts, Goal::Min, Goal::Max), vec![0, 1]);
    }

    #[test]
    fn empty_and_single() {
        assert!(front(&[], Goal::Min, Goal::Max).is_empty());
        assert_eq!(front(&[(4.0, 2.0)], Goal::Min, Goal::Max), vec![0]);
    }

    #[test]
    fn staircase_corners_follow_the_goals() {
        // Min VRAM / max tok/s: hold the slower speed until the next VRAM.
        let s = staircase(
            &[(1.0, 10.0), (2.0, 20.0), (4.0, 25.0)],
            Goal::Min,
            Goal::Max,
        );
        assert_eq!(
            s,
            vec![
                (1.0, 10.0),
                (2.0, 10.0),
                (2.0, 20.0),
                (4.0, 20.0),
                (4.0, 25.0)
            ]
        );
        // Max / max: y falls as x grows; the corner sits under the previous point.
        let s = staircase(&[(150.0, 12.0), (200.0, 8.0)], Goal::Max, Goal::Max);
        assert_eq!(s, vec![(150.0, 12.0), (150.0, 8.0), (200.0, 8.0)]);
    }
}
